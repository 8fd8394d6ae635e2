"""The ProxyJump hops read as OpenSSH writes them (sources/sshjump.py; the hops opened through
real sshds: tests/test_ssh.py)."""

from __future__ import annotations

from typing import Any

import pytest

from logwatch.sources.sshjump import Hop


@pytest.mark.parametrize("text, hop", [
    ("bastion", ("bastion", None, None)), ("root@bastion:2222", ("bastion", 2222, "root")),
    ("[::1]:2222", ("::1", 2222, None)), ("fe80::1", ("fe80::1", None, None)),
    ("u@[fe80::1]", ("fe80::1", None, "u")),
    # OpenSSH's other form, an ssh URI (before: the user "ssh://root", refused as such)
    ("ssh://root@bastion:2222", ("bastion", 2222, "root")),
    ("ssh://bastion", ("bastion", None, None)),
    ("ssh://ops%40corp@[::1]:22/", ("::1", 22, "ops@corp"))])
def test_a_proxyjump_hop_is_read_as_ssh_writes_it(text: str, hop: tuple[Any, ...]) -> None:
    parsed = Hop.parse(text)
    assert (parsed.host, parsed.port, parsed.user) == hop
    assert Hop.parse(str(parsed)) == parsed
