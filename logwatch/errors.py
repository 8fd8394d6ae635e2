"""Errors that name what the user has to fix (file, key path, message); exit code 2."""

from __future__ import annotations


class ConfigError(Exception):
    """A config problem: `logwatch.yaml: targets[2].stall_after: not a duration: '5x'`."""

    def __init__(self, path: str, key: str, message: str) -> None:
        self.path, self.key, self.message = path, key, message
        super().__init__(f"{path}: {key}: {message}" if key else f"{path}: {message}")
