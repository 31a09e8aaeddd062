"""The fake chat platforms leave no task pending when their loop closes.

CI printed 18–66 "Task was destroyed but it is pending! … coro=<Event.wait()>" lines at xdist worker exit. They came
from the tests' fake Telegram, not from the product: each 50 ms of an idle `getUpdates` long poll waited on a
*shielded* `Event.wait()`, so every timeout left that inner task pending (until the next update), and `served()`
(the fake on a loop thread of its own, for tests that run `hermit` as a process) closed its loop without cancelling
what was left. The pending tasks were destroyed with the loop at the next full garbage collection: during the run
pytest's log capture swallowed the message, after it the interpreter's exit printed it (31 in
test_webapp_revoke_jobs alone, 59 in test_small_leftovers_webapp).

Real parts: the fake Telegram's aiohttp server on 127.0.0.1, a real HTTP long poll, and `served()` itself.
"""

from __future__ import annotations

import asyncio

import aiohttp

from fakes.fake_telegram import FakeTelegram
from test_firstday_telegram import served


def _waits(tasks: set[asyncio.Task[object]]) -> list[str]:
    return [repr(t) for t in tasks if not t.done() and t.get_coro().__qualname__ == "Event.wait"]


def test_an_idle_long_poll_of_the_fake_telegram_leaves_no_task_behind() -> None:
    async def main() -> tuple[object, list[str]]:
        fake = FakeTelegram(max_poll_wait=0.3)  # six 50 ms waits with no update: six tasks left before
        await fake.start()
        try:
            async with aiohttp.ClientSession() as http, \
                    http.post(f"{fake.base_url}/bot{fake.token}/getUpdates", json={"timeout": 5}) as r:
                body = await r.json()
            return body, _waits(asyncio.all_tasks())
        finally:
            await fake.stop()

    body, left = asyncio.run(main())
    assert body == {"ok": True, "result": []}  # the poll ran its whole (capped) wait
    assert left == []


class _Lingering(FakeTelegram):
    """Leaves a task running on its loop, as a long poll that a `hermit` process left open would."""

    lingering: asyncio.Task[bool]

    async def start(self, port: int = 0) -> FakeTelegram:
        self.lingering = asyncio.get_running_loop().create_task(asyncio.Event().wait())
        await super().start(port)
        return self


def test_a_served_fake_s_loop_closes_only_after_what_still_ran_on_it_is_cancelled() -> None:
    with served(_Lingering()) as fake:
        assert not fake.lingering.done()
        assert fake.calls == []
    assert fake.lingering.cancelled()  # cancelled and waited for, not destroyed pending with the closed loop
    assert _waits({fake.lingering}) == []
