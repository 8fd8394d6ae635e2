"""logwatch/rules"""
