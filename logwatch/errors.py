"""Errors that name what the user has to fix (file, key path, message); exit code 2."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

MAX_REPORTED = 20   # a config with more problems than this shows the first ones and a count


class ConfigError(Exception):
    """A config problem: `logwatch.yaml: targets[2].stall_after: not a duration: '5x'`."""

    def __init__(self, path: str, key: str, message: str) -> None:
        self.path, self.key, self.message = path, key, message
        super().__init__(f"{path}: {key}: {message}" if key else f"{path}: {message}")


class ConfigErrors(ConfigError):
    """Several problems, reported together: fixing a config one error per run is slow.
    `str()` is one problem per line (at most MAX_REPORTED, then how many more)."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        first = errors[0]
        shown = [str(e) for e in errors[:MAX_REPORTED]]
        if len(errors) > MAX_REPORTED:
            shown.append(f"... and {len(errors) - MAX_REPORTED} more")
        Exception.__init__(self, f"{len(errors)} problems:\n  " + "\n  ".join(shown))
        self.path, self.key, self.message = first.path, first.key, first.message


class ErrorCollector:
    """Gathers the ConfigErrors of independent parts of a config (each target, each sink),
    so that one run reports them all; `raise_if_any` raises one error or a ConfigErrors."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    @contextmanager
    def part(self) -> Iterator[None]:
        """A part of the config that stops at its first problem; the others go on."""
        try:
            yield
        except ConfigErrors as e:
            self.errors.extend(e.errors)
        except ConfigError as e:
            self.errors.append(e)

    def add(self, error: ConfigError) -> None:
        self.errors.append(error)

    def raise_if_any(self) -> None:
        """One problem per key, the first: a later one of the same key is its consequence
        (an unset `${VAR}` in `name:` made the name "missing" too: two lines, one cause)."""
        seen: set[tuple[str, str]] = set()
        errors = []
        for e in self.errors:
            if (e.path, e.key) not in seen or not e.key:
                seen.add((e.path, e.key))
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ConfigErrors(errors)
