"""The `alerts:` section of logwatch.yaml: one entry per sink."""

from __future__ import annotations

import difflib
import os
import re
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError, ErrorCollector
from ...units import env_int, parse_duration
from .backoff import outage_outlasted
from .kinds import DEFAULT_ON, KIND_NAMES

SINK_TYPES = ("slack", "webhook", "alertmanager")
SINK_KEYS = ("type", "name", "url", "url_env", "on", "targets", "secret_env",
             "timeout", "max_attempts", "max_age", "resend")


ROUTE_FIELDS = ("name", "target", "engine")   # what a sink's `targets:` may name besides labels
DEFAULT_MAX_AGE = 3600.0


def validate_alerts(path: str, alerts: list[dict[str, Any]],
                    labels: set[str] | None = None) -> None:
    """Check (and normalise durations in) the `alerts:` entries of the config at `path`;
    every sink is checked, and all the problems are raised together.  `labels`: the label
    names the targets have (a sink routed on another, a typo, would never fire)."""
    names: set[str] = set()
    errors = ErrorCollector()
    for i, a in enumerate(alerts):
        with errors.part():
            _validate_sink(path, f"alerts[{i}]", i, a, names)
        with errors.part():
            _routed_labels(path, f"alerts[{i}]", a, labels)
    errors.raise_if_any()


def _routed_labels(path: str, key: str, a: dict[str, Any], labels: set[str] | None) -> None:
    """A routing label that no target has and is one letter or two off one that a target has
    (`modle` for `model`): a typo, the sink would never fire.  Another unknown label passes:
    a fleet may have no target with it yet (`targets: []`, a reload removing the last)."""
    sel = a.get("targets")
    if labels is None or not isinstance(sel, dict):
        return
    known = set(ROUTE_FIELDS) | labels
    for label in sel:
        near = difflib.get_close_matches(str(label), sorted(known), n=1, cutoff=0.75) \
            if label not in known else []
        if near:
            raise ConfigError(path, f"{key}.targets.{label}", f"no target has the label "
                              f"{label!r} (did you mean {near[0]!r}?): this sink would never "
                              "fire")


def _env_value(path: str, key: str, var: Any) -> str:
    """The value of the environment variable a sink names (`url_env`, `secret_env`): unset
    or empty is a config error now, not a failed delivery at the first crash."""
    value = os.environ.get(str(var), "")
    if not value.strip():
        raise ConfigError(path, key, f"environment variable {var} is not set (or empty): set it "
                          "in the daemon's environment (systemd EnvironmentFile, a Kubernetes "
                          "Secret)")
    return value


def _validate_sink(path: str, key: str, i: int, a: dict[str, Any], names: set[str]) -> None:
    """One sink entry; stops at its first problem."""
    for k in a:
        if k not in SINK_KEYS:
            raise ConfigError(path, f"{key}.{k}", f"unknown key (allowed: {', '.join(SINK_KEYS)})")
    t = a.get("type")
    if t not in SINK_TYPES:
        raise ConfigError(path, f"{key}.type", f"one of {', '.join(SINK_TYPES)}")
    if bool(a.get("url")) == bool(a.get("url_env")):
        raise ConfigError(path, f"{key}.url", "give exactly one of url or url_env "
                          "(url_env: the name of an environment variable holding the URL)")
    if a.get("url"):
        u = urlsplit(str(a["url"]))
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ConfigError(path, f"{key}.url", "not an http(s) URL")
    if a.get("url_env"):
        u = urlsplit(_env_value(path, f"{key}.url_env", a["url_env"]).strip())
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ConfigError(path, f"{key}.url_env", f"${a['url_env']} is not an http(s) URL")
    if a.get("secret_env"):
        _env_value(path, f"{key}.secret_env", a["secret_env"])
    on = a.get("on", list(DEFAULT_ON))
    if not isinstance(on, list) or not on or any(k not in KIND_NAMES for k in on):
        raise ConfigError(path, f"{key}.on", f"a list of: {', '.join(KIND_NAMES)}")
    name = str(a.get("name") or f"{t}-{i}")
    if name in names:
        raise ConfigError(path, f"{key}.name", f"duplicate sink name {name!r}")
    names.add(name)
    if "resend" in a and t != "alertmanager":
        raise ConfigError(path, f"{key}.resend", "only an alertmanager sink sends its open "
                          "alerts again")
    for dk in ("timeout", "max_age", "resend"):
        if dk in a:
            try:
                a[dk] = parse_duration(a[dk])
            except (ValueError, TypeError):
                raise ConfigError(path, f"{key}.{dk}", f"not a duration: {a[dk]!r} "
                                  "(use e.g. 10s, 1h)") from None
            if a[dk] <= 0:
                raise ConfigError(path, f"{key}.{dk}", "a duration above 0 (e.g. 10s, 1h)")
    if "max_attempts" in a:
        a["max_attempts"] = env_int(a["max_attempts"])
    if "max_attempts" in a and (not isinstance(a["max_attempts"], int)
                                or isinstance(a["max_attempts"], bool) or a["max_attempts"] < 1):
        raise ConfigError(path, f"{key}.max_attempts", "a whole number >= 1")
    sel = a.get("targets")
    if sel is not None and not (isinstance(sel, dict) and all(isinstance(v, str) for v in sel.values())):
        raise ConfigError(path, f"{key}.targets", "a mapping of label (or name) to a "
                          "value or regex, e.g. {model: 'GLM-.*'}")
    for label, rx in (sel or {}).items():
        try:
            re.compile(rx)
        except re.error as e:       # before: `--check` said ok, the daemon died at its start
            raise ConfigError(path, f"{key}.targets.{label}", f"invalid regex {rx!r}: {e}") \
                from None


def _about(seconds: float) -> str:
    """A rough duration as a person says it: 45s, 3m, 2h."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{round(seconds / 3600, 1):g}h"


def max_attempts_notes(path: str, alerts: list[dict[str, Any]] | tuple[dict[str, Any], ...]
                       ) -> list[str]:
    """One warning per webhook or Slack sink whose `max_attempts` gives up well before its
    `max_age` (in less than half of it) under the delivery backoff.  Old example configs set
    `max_attempts: 8` (the default then): with the backoff of now a page is given up after
    ~3 minutes of a receiver's outage, the loss that retrying until `max_age` fixed.  An
    Alertmanager sink is left alone: the re-sends of its open alerts are its retries."""
    notes = []
    for i, a in enumerate(alerts):
        attempts = a.get("max_attempts")
        if a.get("type") == "alertmanager" or not isinstance(attempts, int):
            continue
        max_age = float(a.get("max_age", DEFAULT_MAX_AGE))
        outlasted = outage_outlasted(attempts)
        if outlasted < max_age / 2:
            notes.append(f"{path}: alerts[{i}].max_attempts: {attempts} attempts give up after "
                         f"~{_about(outlasted)} of an outage of the receiver (the page is lost); "
                         f"remove it to retry until max_age ({_about(max_age)})")
    return notes
