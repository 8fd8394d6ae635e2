"""logwatch/app"""
