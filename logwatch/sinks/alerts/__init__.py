"""Alerts: crash, stall, ready, slow-start and restart notifications to Slack, webhooks and
Alertmanager (issue 5)."""
