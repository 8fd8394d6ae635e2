"""Telemetry beside the log: what a server's GPUs (`gpu/`: nvidia-smi on the log's host) and
its HTTP endpoint (`probe.py`) say while its log is read.

Apart from `sources/` because it is not the log: sources yield a target's log bytes and
nothing else; telemetry is sampled beside them, on the same host and SSH connection, and the
app hangs it on a target.  Core layer: imports `sources.ssh` (the shared connection) and the
ground floor (`log`, `units`), never the sinks or the app.
"""
