"""Which event loop ``MCP_CHAOS_LOOP`` chooses, and that the chosen one is the one that runs."""

from __future__ import annotations

import asyncio

import pytest

from harness import eventloop
from harness.errors import UsageError


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_and_the_standard_loop_can_be_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(eventloop.LOOP_ENV, raising=False)
    assert eventloop.chosen() == "uvloop"
    assert eventloop.run(loop_module()).startswith("uvloop")
    monkeypatch.setenv(eventloop.LOOP_ENV, "asyncio")
    assert eventloop.run(loop_module()).startswith("asyncio")
    loop = eventloop.new_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()


def test_an_unknown_loop_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eventloop.LOOP_ENV, "trio")
    with pytest.raises(UsageError, match="MCP_CHAOS_LOOP='trio'"):
        eventloop.chosen()
