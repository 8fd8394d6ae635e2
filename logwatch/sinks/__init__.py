"""logwatch/sinks"""
