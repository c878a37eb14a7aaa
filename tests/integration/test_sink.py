"""The effect sink as a payment provider sees calls: with their idempotency keys, deduplicated if asked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest

from harness import rundir
from harness.effects.sink import SinkSource
from harness.redaction import Redactor
from harness.scenario import SinkEffects
from harness.sink import EffectSink

pytestmark = pytest.mark.integration


def calls(
    tmp_path: Path,
    dedupe: bool,
    posts: list[tuple[dict[str, object], dict[str, str]]],
    redactor: Redactor | None = None,
) -> list[int]:
    async def go() -> list[int]:
        sink = EffectSink(tmp_path, dedupe_by_key=dedupe, redact=(redactor or Redactor()).text)
        await sink.start()
        try:
            async with httpx.AsyncClient() as client:
                return [(await client.post(sink.url, json=body, headers=h)).status_code for body, h in posts]
        finally:
            await sink.close()

    return asyncio.run(go())


POSTS: list[tuple[dict[str, object], dict[str, str]]] = [
    ({"marker": "m1"}, {"Idempotency-Key": "k1"}),
    ({"marker": "m1"}, {"Idempotency-Key": "k1"}),  # the retry of m1, same key
    ({"marker": "m2", "idempotency_key": "k2"}, {}),  # a key in the body
    ({"marker": "m2", "idempotency_key": "k2"}, {}),
    ({"marker": "m3"}, {}),  # no key: never deduplicated
    ({"marker": "m3"}, {}),
]


def test_the_sink_records_each_calls_key(tmp_path: Path) -> None:
    assert calls(tmp_path, False, POSTS) == [200] * 6
    lines = [orjson.loads(line) for line in (tmp_path / rundir.SINK).read_bytes().splitlines()]
    assert [line.get("key") for line in lines] == ["k1", "k1", "k2", "k2", None, None]
    assert not any("replay" in line for line in lines)
    assert SinkSource(SinkEffects()).count(tmp_path) == {"m1": 2, "m2": 2, "m3": 2}


def test_deduplicating_by_key_answers_a_replay_that_is_no_effect(tmp_path: Path) -> None:
    assert calls(tmp_path, True, POSTS) == [200] * 6  # a replay is answered as the first call was
    lines = [orjson.loads(line) for line in (tmp_path / rundir.SINK).read_bytes().splitlines()]
    assert [line.get("replay", False) for line in lines] == [False, True, False, True, False, False]
    assert SinkSource(SinkEffects()).count(tmp_path) == {"m1": 1, "m2": 1, "m3": 2}


def test_a_token_sent_as_the_key_is_recorded_redacted_and_still_deduplicated(tmp_path: Path) -> None:
    token = "tok-live-5f3a9c"
    posts: list[tuple[dict[str, object], dict[str, str]]] = [
        ({"marker": "m1"}, {"Idempotency-Key": token}),
        ({"marker": "m1"}, {"Idempotency-Key": token}),
    ]
    assert calls(tmp_path, True, posts, Redactor([token])) == [200, 200]
    text = (tmp_path / rundir.SINK).read_text()
    assert token not in text
    lines = [orjson.loads(line) for line in text.splitlines()]
    assert [line["key"] for line in lines] == ["***", "***"]
    assert SinkSource(SinkEffects()).count(tmp_path) == {"m1": 1}  # the replay is still one
