"""What hangs off a live target (app/target.py `Target`): one protocol, one module each.

`Target` is the live loop (source -> follower -> pipeline, checkpoints, tick, view).  Every
side feature of a target is an `Attachment` in this package (history.py, ledger.py,
gpu.py, probe.py; catchup.py is the one the loop always has), and the daemon and `watch`
build the list a target gets.  The next side feature is one file here and one line there.
"""

from .base import Attachment, LiveTarget

__all__ = ["Attachment", "LiveTarget"]
