"""The tests' own helpers, shared by the test modules and the benchmarks (structlog's
`testing.py`, mtail's `testing.go`): never collected as tests.

- `support.daemon`: `logwatch run` as a real subprocess (`Daemon`, the `daemons` fixture),
  polling with a deadline (`wait_for`), metrics parsing, log writing, a real Prometheus.
- `support.receivers`: local HTTP receivers with programmable answers (`Receiver`, the
  `receivers` fixture) and the alert tests' config writer.
- `support.sshd`: a real OpenSSH server on 127.0.0.1 (`SSHServer`, the `sshd_server` fixture).

A test module imports the fixture it uses (`from support.sshd import sshd_server`); taking
one of them marks the test `integration` (tests/conftest.py).
"""
