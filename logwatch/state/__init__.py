"""logwatch/state"""
