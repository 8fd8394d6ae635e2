"""app/reading.py `Turns`: the loop's matching one slice an iteration, in the order asked.

The fault it fixes is in tests/test_fairness.py (a real daemon, 40 targets behind); here the
rule itself, counted in loop iterations (a callback that re-schedules itself runs once an
iteration), so that nothing depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from logwatch.app.reading import Turns, turns


async def _matching(n: int, slices: int, gate: Turns) -> list[Any]:
    """n tasks each matching `slices` slices as feed_in_slices does (take, match, give,
    yield); the log of ticks (one per loop iteration) and (task, slice) in order."""
    log: list[Any] = []
    running = [True]

    def tick() -> None:
        log.append("tick")
        if running[0]:
            asyncio.get_running_loop().call_soon(tick)

    async def target(i: int) -> None:
        for k in range(slices):
            await gate.take()
            try:
                log.append((i, k))
            finally:
                gate.give()
            await asyncio.sleep(0)

    asyncio.get_running_loop().call_soon(tick)
    await asyncio.gather(*(target(i) for i in range(n)))
    running[0] = False
    return log


def _per_iteration(log: list[Any]) -> list[list[Any]]:
    out: list[list[Any]] = [[]]
    for x in log:
        if x == "tick":
            out.append([])
        else:
            out[-1].append(x)
    return out


def test_one_slice_an_iteration_in_the_order_asked() -> None:
    log = asyncio.run(_matching(5, 3, Turns()))
    per = _per_iteration(log)
    assert max(len(s) for s in per) == 1, per     # before: all 5 targets in each iteration
    order = [x for s in per for x in s]
    assert order == [(i, k) for k in range(3) for i in range(5)]   # FIFO: each in turn


def test_a_lone_target_is_not_held_back() -> None:
    """No one waiting: a turn every iteration (the lone target's own pace, as before)."""
    per = _per_iteration(asyncio.run(_matching(1, 6, Turns())))
    busy = [s for s in per if s]
    assert len(busy) == 6
    first, last = per.index(busy[0]), per.index(busy[-1])
    assert last - first == 5, per


def test_a_task_cancelled_in_line_or_with_its_turn_holds_no_one() -> None:
    async def main() -> list[str]:
        gate, got = Turns(), []
        await gate.take()                       # held by us

        async def waiter(name: str) -> None:
            await gate.take()
            got.append(name)
            gate.give()

        a = asyncio.create_task(waiter("a"))
        b = asyncio.create_task(waiter("b"))
        c = asyncio.create_task(waiter("c"))
        await asyncio.sleep(0)                  # all three in line
        a.cancel()                              # cancelled in line
        await asyncio.sleep(0)
        gate.give()                             # b's turn ...
        b.cancel()                              # ... cancelled with it: passed on to c
        await asyncio.gather(a, b, c, return_exceptions=True)
        for _ in range(3):
            await asyncio.sleep(0)
        await asyncio.wait_for(gate.take(), 1)  # free again
        gate.give()
        return got

    assert asyncio.run(main()) == ["c"]


def test_one_turns_a_loop() -> None:
    async def both() -> tuple[Turns, Turns]:
        return turns(), turns()

    a1, a2 = asyncio.run(both())
    b1, _ = asyncio.run(both())
    assert a1 is a2 and a1 is not b1
