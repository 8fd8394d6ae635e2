"""`logwatch.yaml`: the daemon's configuration, loaded and validated in one place.

Every problem is a `ConfigError` naming the file and the key path
(`logwatch.yaml: targets[2].stall_after: not a duration: '5x' ...`), and all of them are
reported at once (each target and each sink is checked even when another has a problem; up
to 20 shown); `logwatch run` exits 2.  YAML syntax errors say line and column.
Secrets are never in this file's values that get logged: webhook URLs can come from the
environment (`url_env`) and are shown redacted.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ..state.files import default_state_dir
from ..rules.pack import PackError, load_pack
from ..errors import ConfigError, ErrorCollector
from ..sinks.alerts.config import validate_alerts
from ..units import env_int, parse_budget, parse_duration
from ..yamlload import YAMLTooLarge, load_yaml
from ..sources import SourceError, source_kind
from ..sources.newest import pattern_problem
from ..sources.command import shell_note, shell_syntax
from ..sources.cursor import ROTATE_WAIT
from ..telemetry.gpu import GpuConfig, parse_gpu_config
from ..telemetry.probe import ProbeConfig, parse_probe_config
from ..sources.ssh import SSHOptions, SSHTarget

TOP_KEYS = ("listen", "state_dir", "targets", "alerts", "defaults", "log_level", "checkpoint",
            "state_retention", "alert_marks")
TARGET_KEYS = ("name", "source", "rules", "labels", "stall_after", "slow_factor", "ssh", "poll",
               "from_start", "rotate_wait", "gpu", "probe", "source_down_after")
SOURCE_DOWN_AFTER = 60.0    # a source failing this long is a `source_down` alert
SSH_KEYS = ("known_hosts", "client_keys", "config", "username", "port", "connect_timeout",
            "keepalive_interval", "keepalive_count_max", "poll_interval", "idle_poll_interval",
            "transport")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED_LABELS = {"target", "engine", "source", "phase", "reason", "rule", "sink", "kind", "le",
                   "counter"}


@dataclass(frozen=True)
class TargetConfig:
    name: str
    source: str
    rules: str = "auto"
    labels: dict[str, str] = field(default_factory=dict)
    stall_after: float | dict[str, float] | None = None
    ssh: SSHOptions = field(default_factory=SSHOptions)
    poll: bool = False
    from_start: bool = False
    slow_factor: float = 1.5
    shown_source: str = ""    # the source as written (before ${VAR}), password redacted
    rotate_wait: float = ROTATE_WAIT   # a rotated file is read until quiet this long
    gpu: GpuConfig = field(default_factory=GpuConfig)   # nvidia-smi beside the log
    probe: ProbeConfig = field(default_factory=ProbeConfig)  # the server's HTTP endpoint
    source_down_after: float = SOURCE_DOWN_AFTER   # grace before `source_down`
    # an ssh:// log's missing directory is waited for, as a local one's is (the daemon
    # always: a job's own directory is made when it starts); `watch` only with --wait
    wait_for_dir: bool = True

    @property
    def display_source(self) -> str:
        """What the status page and /api/status show: never a secret."""
        return self.shown_source or redact_url(self.source)

    @property
    def kind(self) -> str:
        return source_kind(self.source)

    def stall_budget(self) -> float | None:
        return self.stall_after if isinstance(self.stall_after, float) else None


@dataclass(frozen=True)
class Config:
    path: str
    listen_host: str = "127.0.0.1"
    listen_port: int = 9105
    state_dir: Path = field(default_factory=default_state_dir)
    targets: tuple[TargetConfig, ...] = ()
    alerts: tuple[dict[str, Any], ...] = ()
    log_level: str = "info"
    checkpoint_interval: float = 5.0
    # seconds the state of a target no longer in the config is kept (0: for ever)
    state_retention: float = 30 * 86400.0
    # the newest alert marks kept per target (the dedupe of a log read again: outbox.py)
    alert_marks: int = 64

    def target(self, name: str) -> TargetConfig:
        for t in self.targets:
            if t.name == name:
                return t
        raise KeyError(name)


def load_config(path: str | Path) -> Config:
    p = str(path)
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(p, "", "no such file (see deploy/logwatch.example.yaml)") from None
    except OSError as e:
        raise ConfigError(p, "", f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(p, "", "not UTF-8 text") from None
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as e:
        raise yaml_error(p, e) from None
    except YAMLTooLarge as e:
        raise ConfigError(p, "", f"refused: {e}") from None
    # a file caught mid-write (truncated, or cut after its first keys) parses: it would stop
    # every target at a reload.  `targets: []` says it on purpose.
    if doc is None:
        raise ConfigError(p, "", "the file is empty (being written?)")
    if isinstance(doc, dict) and "targets" not in doc:
        raise ConfigError(p, "targets", "missing (a list of targets to watch; `targets: []` "
                                        "for none)")
    return parse_config(doc, p)


def yaml_error(path: str, e: yaml.YAMLError) -> ConfigError:
    """`logwatch.yaml:5:1: not valid YAML: did not find expected ',' or ']' (while parsing a
    flow sequence started at line 4, column 13)`: where to look first, 1-based as editors
    count."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        mark = e.problem_mark
        what = e.problem or "syntax error"
        if e.context:
            ctx = e.context
            if e.context_mark is not None:
                ctx += f" started at line {e.context_mark.line + 1}, column {e.context_mark.column + 1}"
            what += f" ({ctx})"
        return ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}", "", f"not valid YAML: {what}")
    return ConfigError(path, "", f"not valid YAML: {e}".replace("\n", " "))


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, path: str = "logwatch.yaml", key: str = "",
               errors: ErrorCollector | None = None) -> Any:
    """`${VAR}` / `${VAR:-default}` in string values, from the environment (a DaemonSet's
    `${NODE_NAME}`, a path per host).  An unset variable without a default is an error
    (raised, or added to `errors` and the text left as written)."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            v = os.environ.get(m.group(1))
            if v is None:
                if m.group(2) is None:
                    err = ConfigError(path, key, f"environment variable {m.group(1)} is not set "
                                      "(use ${VAR:-default} for a default)")
                    if errors is None:
                        raise err
                    errors.add(err)
                    return m.group(0)
                return m.group(2)
            return v
        return _ENV.sub(sub, value)
    if isinstance(value, list):
        return [expand_env(v, path, f"{key}[{i}]", errors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: expand_env(v, path, f"{key}.{k}" if key else str(k), errors)
                for k, v in value.items()}
    return value


_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^/@:]*):[^/@]*@", re.I)


def redact_url(text: str) -> str:
    """`ssh://user:secret@host/x` -> `ssh://user:***@host/x` (other text unchanged)."""
    return _PASSWORD.sub(r"\1:***@", text)


def parse_config(doc: Any, path: str = "logwatch.yaml") -> Config:
    if doc is None:
        doc = {}
    errors = ErrorCollector()
    written = doc      # before ${VAR} expansion: what is shown of each source
    doc = expand_env(doc, path, errors=errors)
    if not isinstance(doc, dict):
        raise ConfigError(path, "", "the config is a mapping (listen, state_dir, targets, alerts)")
    host, port = "127.0.0.1", 9105
    with errors.part():
        _keys(path, "", doc, TOP_KEYS)
    with errors.part():
        host, port = _listen(path, doc.get("listen", "127.0.0.1:9105"))
    state_dir = _state_dir(path, doc.get("state_dir"), errors)
    defaults = doc.get("defaults") or {}
    with errors.part():
        if not isinstance(defaults, dict):
            defaults = {}
            raise ConfigError(path, "defaults", "must be a mapping of target keys")
        _keys(path, "defaults", defaults, tuple(k for k in TARGET_KEYS if k not in ("name", "source")))
    targets = _targets(path, doc, written, defaults, errors)
    alerts = doc.get("alerts") or []
    with errors.part():
        if not isinstance(alerts, list) or not all(isinstance(a, dict) for a in alerts):
            alerts = []
            raise ConfigError(path, "alerts", "must be a list of sinks ({type: slack|webhook|alertmanager, ...})")
    # YAML 1.1 reads a bare `on:` key as the boolean true: it means the `on` list here
    alerts = [{("on" if k is True else k): v for k, v in a.items()} for a in alerts]
    level = str(doc.get("log_level", "info")).lower()
    with errors.part():
        if level not in ("debug", "info", "warning", "error"):
            raise ConfigError(path, "log_level", "one of debug, info, warning, error")
    interval = 5.0
    with errors.part():
        interval = _checkpoint_interval(path, doc.get("checkpoint", {}) or {})
    retention = 30 * 86400.0
    with errors.part():
        retention = _retention(path, doc.get("state_retention", "30d"))
    marks = 64
    with errors.part():
        marks = _alert_marks(path, doc.get("alert_marks", 64))
    with errors.part():
        # the alert schema lives with the alerts
        validate_alerts(path, alerts, {k for t in targets for k in t.labels})
    errors.raise_if_any()
    return Config(path, host, port, state_dir, tuple(targets), tuple(alerts), level, interval,
                  retention, marks)


def _state_dir(path: str, value: Any, errors: ErrorCollector) -> Path:
    """`state_dir`: a relative one is next to the config, as a pack path is (before: the
    working directory's, `/` under systemd)."""
    with errors.part():
        if value is not None and (not isinstance(value, str) or not value.strip()):
            value = None
            raise ConfigError(path, "state_dir", "a directory path")
    state_dir = Path(os.path.expanduser(str(value or default_state_dir())))
    if not state_dir.is_absolute():
        state_dir = Path(os.path.dirname(os.path.abspath(path))) / state_dir
    return state_dir


def _targets(path: str, doc: dict[str, Any], written: Any, defaults: dict[str, Any],
             errors: ErrorCollector) -> list[TargetConfig]:
    """`targets:`, each merged over `defaults:` (their `ssh:` merged key by key); every
    target's problems collected in `errors`, a duplicate name named with its first use."""
    raw_targets = doc.get("targets", [])
    with errors.part():
        if raw_targets is None:     # `targets:` and nothing after: a file cut mid-write
            raw_targets = []
            raise ConfigError(path, "targets", "has no value (being written?); `targets: []` "
                              "for none")
        if not isinstance(raw_targets, list):
            raw_targets = []
            raise ConfigError(path, "targets", "must be a list of targets")
    targets: list[TargetConfig] = []
    seen: dict[str, int] = {}
    logs: dict[str, int] = {}         # the log a target reads -> its index in `targets`
    for i, t in enumerate(raw_targets):
        key = f"targets[{i}]"
        with errors.part():
            if not isinstance(t, dict):
                raise ConfigError(path, key, "a target is a mapping with at least name and source")
            merged = {**{k: v for k, v in defaults.items() if k != "ssh"}, **t}
            if "ssh" in defaults or "ssh" in t:
                merged["ssh"] = {**(defaults.get("ssh") or {}), **(t.get("ssh") or {})}
            tc = _target(path, key, merged, t)
            raw = written["targets"][i].get("source") if isinstance(written, dict) else None
            tc = replace(tc, shown_source=redact_url(str(raw if raw else tc.source)))
            if tc.name in seen:
                raise ConfigError(path, f"{key}.name", f"duplicate target name {tc.name!r} "
                                  f"(also targets[{seen[tc.name]}])")
            log = _same_log(tc.source)
            if log in logs:      # before: every line read twice, every crash paged twice
                first = targets[logs[log]]
                raise ConfigError(path, f"{key}.source", f"the same log as target "
                                  f"{first.name!r} (targets[{seen[first.name]}]): each crash "
                                  "would be alerted once per target")
            seen[tc.name] = i
            logs[log] = len(targets)
            targets.append(tc)
    return targets


def _same_log(source: str) -> str:
    """What names one log whichever way it is written: a local path absolute, normalised and
    its symlinks resolved, an existing file by its device and inode (a hard link).  Before,
    a symlink to another target's log (or to its directory) passed: each crash paged twice."""
    if source_kind(source) != "file":
        return source.strip()
    path = os.path.realpath(os.path.expanduser(source))
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return path
    return f"{st.st_dev}:{st.st_ino}"


def _checkpoint_interval(path: str, ck: Any) -> float:
    if not isinstance(ck, dict):
        raise ConfigError(path, "checkpoint", "a mapping ({interval: 1s})")
    _keys(path, "checkpoint", ck, ("interval",))
    return _duration(path, "checkpoint.interval", ck.get("interval", "5s"))


ALERT_MARKS_MIN = 16      # `alert_marks` below this is refused (a startup decides several)


def _alert_marks(path: str, value: Any) -> int:
    """`alert_marks`: how many of a target's newest alert marks the daemon keeps, the dedupe
    of a log read again (a SIGHUP, a restart, a lost checkpoint: its latest startup).  Each
    startup makes a few (restarted, crashed, its resolution, ready), so fewer than
    ALERT_MARKS_MIN would page a startup read again twice."""
    if isinstance(value, bool) or not isinstance(value, int) or value < ALERT_MARKS_MIN:
        raise ConfigError(path, "alert_marks", f"a whole number of at least {ALERT_MARKS_MIN} "
                          f"(the newest alert marks kept per target; default 64), not {value!r}")
    return value


RETENTION_MIN = 600.0     # seconds: `state_retention` below this (but 0) is refused


def _retention(path: str, value: Any) -> float:
    """`state_retention`: a duration, days allowed (`30d`); 0 keeps the state for ever; at
    least RETENTION_MIN otherwise: the passes that mark the watched names come at most every
    minute, so under a few minutes a name watched until a restart was removed at it (helper
    adv43: `1m` removed a name watched 2 s before)."""
    if isinstance(value, str) and value.strip().endswith("d"):
        try:
            days = float(value.strip()[:-1])
            if days < 0:
                raise ValueError(value)
            keep = days * 86400.0
        except ValueError:
            raise ConfigError(path, "state_retention", f"not a duration: {value!r} (use e.g. "
                              "30d, 720h; 0 keeps the state of removed targets for ever)") from None
    else:
        keep = _duration(path, "state_retention", value)
    if 0 < keep < RETENTION_MIN:
        raise ConfigError(path, "state_retention", f"{value!r} is shorter than 10m: the state "
                          "of a target watched minutes ago would be removed (use e.g. 30d; 0 "
                          "keeps it for ever)")
    return keep


def _keys(path: str, where: str, d: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """Every unknown key of `d` (a typo, with the nearest allowed one), not only the first."""
    errors = ErrorCollector()
    for k in d:
        if k not in allowed:
            key = f"{where}.{k}" if where else str(k)
            close = _nearest(k, allowed)
            hint = f"did you mean {close}? " if close else ""
            errors.add(ConfigError(path, key, f"unknown key ({hint}allowed: {', '.join(allowed)})"))
    errors.raise_if_any()


def _nearest(key: Any, allowed: tuple[str, ...]) -> str | None:
    """The allowed key a typo most likely meant (None: none is close)."""
    import difflib
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
    return close[0] if close else None


def _listen(path: str, value: Any) -> tuple[str, int]:
    text = str(value)
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(path, "listen", f"not HOST:PORT: {text!r} (e.g. 127.0.0.1:9105)")
    return host, int(port)


def listen_problem(cfg: "Config") -> str | None:
    """What stops the daemon listening on `listen`'s host, tried without its port (a daemon
    running on it holds that): a host that does not resolve, an address not this machine's.
    `run --check` says it as `run` would; before, it passed what `run` then refused."""
    import socket
    try:
        infos = socket.getaddrinfo(cfg.listen_host, 0, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        return f"{cfg.listen_host!r} does not resolve: {getattr(e, 'strerror', None) or e}"
    family, kind, proto, _, addr = infos[0]
    try:
        with socket.socket(family, kind, proto) as s:
            s.bind(addr[:1] + (0,) + tuple(addr[2:]))
    except OSError as e:
        return f"cannot listen on {cfg.listen_host}: {e.strerror or e}"
    return None


def _duration(path: str, key: str, value: Any) -> float:
    try:
        return parse_duration(value)
    except (ValueError, TypeError):
        raise ConfigError(path, key, f"not a duration: {value!r} (use e.g. 30s, 5m, 1h)") from None


def _slow_factor(path: str, key: str, value: Any) -> float:
    try:
        slow = float(value)
    except (TypeError, ValueError):
        slow = 0.0
    if not slow > 1.0:
        raise ConfigError(path, f"{key}.slow_factor", "a number above 1 (a `slow` alert when "
                          "a startup takes that many times its usual duration)")
    return slow


_YAML_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
               "false": False, "no": False, "off": False, "0": False, "": False}


def _flag(path: str, key: str, value: Any) -> bool:
    if isinstance(value, str):  # `${VAR}` expands to text: read it as YAML would
        value = _YAML_BOOLS.get(value.lower(), value)
    if not isinstance(value, bool):
        raise ConfigError(path, key, "true or false")
    return value


def _target(path: str, key: str, t: dict[str, Any], own: dict[str, Any]) -> TargetConfig:
    """One target's settings.  Each field is checked on its own, so a typo in one key does
    not hide the target's other problems: all of them are raised together (ConfigErrors)."""
    errors = ErrorCollector()
    with errors.part():
        _keys(path, key, own, TARGET_KEYS)
    name = t.get("name")
    meant = {_nearest(k, TARGET_KEYS) for k in own if k not in TARGET_KEYS}
    with errors.part():
        if (name is not None or "name" not in meant) and \
                (not isinstance(name, str) or not _NAME.match(name)):
            raise ConfigError(path, f"{key}.name", "missing or not a simple name "
                              "(letters, digits, . _ : -; at most 128)")
    source = t.get("source")
    with errors.part():
        if source is not None or "source" not in meant:  # `sorce:` said once, as the typo
            _source(path, key, source)
    rules = t.get("rules", "auto")
    with errors.part():
        rules = _rules(path, key, rules)
    labels = t.get("labels") or {}
    with errors.part():
        _labels(path, key, labels)
    stall: float | dict[str, float] | None = None
    with errors.part():
        stall = _stall(path, key, t.get("stall_after"), rules if isinstance(rules, str) else "auto")
    slow = 1.5
    with errors.part():
        slow = _slow_factor(path, key, t.get("slow_factor", 1.5))
    ssh = SSHOptions()
    with errors.part():
        ssh = _ssh(path, key, t.get("ssh") or {})
    flags = {"poll": False, "from_start": False}
    for flag in ("poll", "from_start"):
        with errors.part():
            flags[flag] = _flag(path, f"{key}.{flag}", t.get(flag, False))
    rotate_wait, down_after = ROTATE_WAIT, SOURCE_DOWN_AFTER
    with errors.part():
        rotate_wait = _duration(path, f"{key}.rotate_wait", t.get("rotate_wait", ROTATE_WAIT))
    with errors.part():
        down_after = _duration(path, f"{key}.source_down_after",
                               t.get("source_down_after", SOURCE_DOWN_AFTER))
    gpu, probe = None, None
    for field_, parse in (("gpu", parse_gpu_config), ("probe", parse_probe_config)):
        with errors.part():
            try:
                parsed = parse(t.get(field_), where=f"{key}.{field_}")
            except ValueError as e:
                where, _, msg = str(e).partition(": ")
                raise ConfigError(path, where, msg) from None
            if field_ == "gpu":
                gpu = parsed
            else:
                probe = parsed
    errors.raise_if_any()
    assert isinstance(name, str) and isinstance(source, str) and gpu is not None and probe is not None
    return TargetConfig(name, source, rules, {k: str(v) for k, v in labels.items()}, stall, ssh,
                        flags["poll"], flags["from_start"], float(slow), rotate_wait=rotate_wait,
                        gpu=gpu, probe=probe, source_down_after=down_after)


def _source(path: str, key: str, source: Any) -> None:
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(path, f"{key}.source", "missing (a path, ssh://[user@]host[:port]/abs/path, "
                          "cmd:COMMAND or -)")
    if source == "-":
        raise ConfigError(path, f"{key}.source", "stdin (-) is for `logwatch watch`, not the daemon")
    if source_kind(source) == "ssh":
        try:
            SSHTarget.parse(source)
        except SourceError as e:
            raise ConfigError(path, f"{key}.source", str(e)) from None
    elif source_kind(source) == "command" and not source[4:].strip():
        raise ConfigError(path, f"{key}.source", "cmd: needs a command")
    elif source_kind(source) == "command" and (op := shell_syntax(source[4:])):
        raise ConfigError(path, f"{key}.source", shell_note(source[4:], op))
    elif source_kind(source) == "file" and not os.path.isabs(os.path.expanduser(source)):
        raise ConfigError(path, f"{key}.source", f"use an absolute path: {source!r}")
    file_path = SSHTarget.parse(source).path if source_kind(source) == "ssh" else source
    # a pattern in the file name follows the newest matching file (sources/newest.py)
    problem = pattern_problem(file_path) if source_kind(source) in ("file", "ssh") else None
    if problem:
        raise ConfigError(path, f"{key}.source", problem)


def _rules(path: str, key: str, rules: Any) -> str:
    """The target's pack: a name, a .yaml path (relative ones next to the config) or auto."""
    if not isinstance(rules, str):
        raise ConfigError(path, f"{key}.rules", "a pack name, a .yaml path or auto")
    if (rules.endswith((".yaml", ".yml")) or "/" in rules) and \
            not os.path.isabs(os.path.expanduser(rules)):
        rules = os.path.join(os.path.dirname(os.path.abspath(path)), rules)  # next to the config
    if rules != "auto":
        try:
            load_pack(rules)
        except PackError as e:
            raise ConfigError(path, f"{key}.rules", str(e)) from None
    return rules


def _labels(path: str, key: str, labels: Any) -> None:
    if not isinstance(labels, dict):
        raise ConfigError(path, f"{key}.labels", "a mapping of label names to values")
    errors = ErrorCollector()
    for lk, lv in labels.items():
        if not isinstance(lk, str) or not _LABEL.match(lk) or lk in RESERVED_LABELS:
            errors.add(ConfigError(path, f"{key}.labels.{lk}", "not a usable Prometheus label name "
                                   f"([a-zA-Z_][a-zA-Z0-9_]*, not one of {', '.join(sorted(RESERVED_LABELS))})"))
        elif not isinstance(lv, (str, int, float, bool)):
            errors.add(ConfigError(path, f"{key}.labels.{lk}", "a label value is a string"))
    errors.raise_if_any()


def _stall(path: str, key: str, sv: Any, rules: str) -> float | dict[str, float] | None:
    if sv is None:
        return None
    if not isinstance(sv, dict):
        return _budget(path, f"{key}.stall_after", sv)
    known = _known_phases(rules)
    errors = ErrorCollector()
    out: dict[str, float] = {}
    for ph, d in sv.items():
        with errors.part():
            if ph not in known:
                raise ConfigError(path, f"{key}.stall_after.{ph}", "unknown phase (phases: "
                                  f"{', '.join(known)})")
            out[str(ph)] = _budget(path, f"{key}.stall_after.{ph}", d)
    errors.raise_if_any()
    return out


def _budget(path: str, key: str, v: Any) -> float:
    """A stall budget: more than 0 (0s stalled every phase at once)."""
    seconds = _duration(path, key, v)
    try:
        return parse_budget(seconds)
    except ValueError:
        raise ConfigError(path, key, f"more than 0s (a budget of {v!r} stalls at once)") from None


def _ssh(path: str, key: str, ssh_doc: Any) -> SSHOptions:
    if not isinstance(ssh_doc, dict):
        raise ConfigError(path, f"{key}.ssh", "a mapping (known_hosts, client_keys, ...)")
    errors = ErrorCollector()
    with errors.part():
        _keys(path, f"{key}.ssh", ssh_doc, SSH_KEYS)
    values: dict[str, Any] = {}
    for k, v in ssh_doc.items():
        if k not in SSH_KEYS:
            continue
        with errors.part():
            values[k] = _duration(path, f"{key}.ssh.{k}", v) \
                if k in ("connect_timeout", "keepalive_interval", "poll_interval",
                         "idle_poll_interval") else _ssh_value(path, f"{key}.ssh.{k}", k, v)
            if k in SSH_ABOVE_ZERO and not values[k] > 0:
                raise ConfigError(path, f"{key}.ssh.{k}", f"a duration above 0, not {v!r} "
                                  f"({SSH_ABOVE_ZERO[k]})")
    errors.raise_if_any()
    try:
        return SSHOptions.from_dict(values)
    except TypeError as e:
        raise ConfigError(path, f"{key}.ssh", str(e)) from None


# what 0 would do (keepalive_interval 0 is asyncssh's "no keepalives": allowed)
_BUSY_POLL = "0 polls SFTP in a busy loop"
SSH_ABOVE_ZERO = {
    "connect_timeout": "asyncssh reads 0 as no timeout: a host that takes the TCP connection "
                       "and never answers would hold the target for ever",
    "poll_interval": _BUSY_POLL, "idle_poll_interval": _BUSY_POLL}


def _ssh_value(path: str, key: str, name: str, v: Any) -> Any:
    """An `ssh:` option of the right type, or a ConfigError naming it: before, a wrong one
    passed `--check` and failed at every connect (`port: 70000` an OverflowError, a string
    of `client_keys` a key file per character)."""
    def whole(lo: int, hi: int) -> int:
        nonlocal v
        v = env_int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ConfigError(path, key, f"a whole number from {lo} to {hi}, not {v!r}")
        return v

    def paths() -> list[str]:
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not items or \
                not all(isinstance(x, str) and x for x in items):
            raise ConfigError(path, key, f"a file path or a list of them, not {v!r}")
        return items

    if name == "port":
        return whole(1, 65535)
    if name == "keepalive_count_max":
        return whole(0, 1000)
    if name in ("client_keys", "config"):
        return None if v is None else paths()    # None: unset (a default's, for the agent)
    if name in ("known_hosts", "username", "transport") and (not isinstance(v, str) or not v):
        raise ConfigError(path, key, f"a string, not {v!r}")
    return v


def _known_phases(rules: str) -> list[str]:
    from ..rules.pack import TERMINAL, WAITING, load_all_shipped
    if rules != "auto":
        try:
            return list(load_pack(rules).phases)
        except PackError:
            pass
    out: list[str] = []
    for p in load_all_shipped():
        out += [ph for ph in p.phases if ph not in out]
    return [ph for ph in out if ph not in (WAITING, *TERMINAL)]


def shard_of(name: str, shards: int) -> int:
    """The shard a target belongs to: jump consistent hash (Lamping & Veach) of a stable hash
    of its name.  Adding or removing other targets never moves it; going from N to N+1
    shards moves only the ~1/(N+1) of targets the new shard takes."""
    import hashlib
    key = int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:8], "big")
    b, j = -1, 0
    while j < shards:
        b = j
        key = (key * 2862933555777941757 + 1) % (1 << 64)
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def parse_shard(spec: str, hostname: str | None = None) -> tuple[int, int]:
    """`K/N` (0-based K), or `ordinal/N`: K from a StatefulSet pod name (`logwatch-3` -> 3)."""
    k, _, n = spec.partition("/")
    if not n.isdigit() or int(n) < 1:
        raise ValueError(f"--shard wants K/N, e.g. 0/4 or ordinal/4: {spec!r}")
    if k == "ordinal":
        import socket
        host = hostname or os.environ.get("HOSTNAME") or socket.gethostname()
        m = re.search(r"-(\d+)$", host)
        if not m:
            raise ValueError(f"--shard ordinal/N: the host name {host!r} does not end in -NUMBER "
                             "(a StatefulSet pod name)")
        k = m.group(1)
    if not k.isdigit() or int(k) >= int(n):
        raise ValueError(f"--shard {spec!r}: K must be 0..{int(n) - 1}")
    return int(k), int(n)


def select_shard(cfg: Config, shard: tuple[int, int] | None) -> Config:
    if shard is None:
        return cfg
    k, n = shard
    import dataclasses
    return dataclasses.replace(cfg, targets=tuple(t for t in cfg.targets if shard_of(t.name, n) == k))
