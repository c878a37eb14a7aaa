"""A run's stop signals: SIGTERM and SIGHUP cancel it, a signal ignored by whoever started the
harness (``nohup``) stays ignored, and every handler is put back as it was."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from harness.run.runner import cancel_on_stop_signals


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def during() -> dict[signal.Signals, object]:
    async def look() -> dict[signal.Signals, object]:
        return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    return asyncio.run(cancel_on_stop_signals(look()))


@pytest.mark.usefixtures("handlers")
def test_a_signal_nohup_ignores_stays_ignored() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    seen = during()
    assert seen[signal.SIGHUP] == signal.SIG_IGN  # a closed terminal does not stop a nohup'd run
    assert seen[signal.SIGTERM] != signal.SIG_DFL  # SIGTERM still cancels it
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.usefixtures("handlers")
def test_the_handlers_before_the_run_are_put_back() -> None:
    def mine(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("not called")

    signal.signal(signal.SIGHUP, mine)
    signal.signal(signal.SIGTERM, mine)
    seen = during()
    assert seen[signal.SIGHUP] is not mine
    assert seen[signal.SIGTERM] is not mine
    assert signal.getsignal(signal.SIGHUP) is mine
    assert signal.getsignal(signal.SIGTERM) is mine
