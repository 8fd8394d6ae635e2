"""The `alerts:` section of logwatch.yaml: one entry per sink."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError
from ...units import parse_duration

SINK_TYPES = ("slack", "webhook", "alertmanager")
KINDS = ("crashed", "stalled", "slow", "ready", "restarted", "phase")
SINK_KEYS = ("type", "name", "url", "url_env", "on", "targets", "secret_env",
             "timeout", "max_attempts", "max_age")


def validate_alerts(path: str, alerts: list[dict[str, Any]]) -> None:
    """Check (and normalise durations in) the `alerts:` entries of the config at `path`."""
    names: set[str] = set()
    for i, a in enumerate(alerts):
        key = f"alerts[{i}]"
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
        on = a.get("on", list(KINDS[:3]))
        if not isinstance(on, list) or not on or any(k not in KINDS for k in on):
            raise ConfigError(path, f"{key}.on", f"a list of: {', '.join(KINDS)}")
        name = str(a.get("name") or f"{t}-{i}")
        if name in names:
            raise ConfigError(path, f"{key}.name", f"duplicate sink name {name!r}")
        names.add(name)
        for dk in ("timeout", "max_age"):
            if dk in a:
                try:
                    a[dk] = parse_duration(a[dk])
                except (ValueError, TypeError):
                    raise ConfigError(path, f"{key}.{dk}", f"not a duration: {a[dk]!r} "
                                      "(use e.g. 10s, 1h)") from None
        if "max_attempts" in a and (not isinstance(a["max_attempts"], int)
                                    or isinstance(a["max_attempts"], bool) or a["max_attempts"] < 1):
            raise ConfigError(path, f"{key}.max_attempts", "a whole number >= 1")
        sel = a.get("targets")
        if sel is not None and not (isinstance(sel, dict) and all(isinstance(v, str) for v in sel.values())):
            raise ConfigError(path, f"{key}.targets", "a mapping of label (or name) to a "
                              "value or regex, e.g. {model: 'GLM-.*'}")
