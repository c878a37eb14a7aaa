"""The history file: append-only, readable while partial, strict about corruption."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import get_args

import orjson
import pytest

from harness.audit.verdicts import STATUS_BY_NAME, ClientStatus
from harness.errors import HistoryError
from harness.events import CrashPoint
from harness.history import (
    MESSAGE_LIMIT,
    EventType,
    FaultKind,
    HistoryWriter,
    IntentStatus,
    Outcome,
    StreamFaultKind,
    excerpt,
    read_history,
)
from harness.redaction import Redactor
from harness.report.files import COLUMNS


class FakeClock:
    """An injectable clock: history timestamps without sleeping."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_round_trip_with_sequence_and_times(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, clock=clock) as h:
        h.emit_fields(EventType.RUN_STARTED, run_id="r")
        clock.now += 1.5
        h.emit_fields(EventType.ATTEMPT_STARTED, intent=0, attempt=1, id=1, key="k", outcome=Outcome.OK)
    events = list(read_history(path))
    assert [(e["seq"], e["t"], e["type"]) for e in events] == [
        (0, 0.0, "run_started"),
        (1, 1.5, "attempt_started"),
    ]
    assert events[1]["key"] == "k"
    assert events[1]["outcome"] == "ok"  # enums are written as their values


def test_events_are_on_disk_before_close(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path)
    h.emit_fields(EventType.RUN_STARTED)
    # No flush, no close: a reader (or a crash) sees the event already.
    assert [e["type"] for e in read_history(path)] == ["run_started"]
    h.close()
    with pytest.raises(HistoryError, match="closed"):
        h.emit_fields(EventType.RUN_ENDED)


def test_held_events_go_out_with_the_next_one_in_order(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path)
    h.emit_fields(EventType.RUN_STARTED)
    assert h.hold(EventType.INTENT_STARTED, intent=0) == 1
    assert [e["type"] for e in read_history(path)] == ["run_started"]  # held: not yet written
    h.emit_fields(EventType.ATTEMPT_STARTED, intent=0, attempt=1)
    assert [e["seq"] for e in read_history(path)] == [0, 1, 2]
    h.hold(EventType.ATTEMPT_ENDED, intent=0, attempt=1)
    h.flush()
    assert [e["type"] for e in read_history(path)][-1] == "attempt_ended"
    h.hold(EventType.INTENT_ENDED, intent=0)
    h.close()  # a held event is never dropped by closing
    assert [e["type"] for e in read_history(path)][-1] == "intent_ended"


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(b'{"seq":0,"t":0,"type":"run_started"}\n{"seq":1,"t":0.1,"ty')
    assert [e["seq"] for e in read_history(path)] == [0]


def test_corrupt_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(b'{"seq":0,"t":0,"type":"run_started"}\nnot json\n{"seq":2,"t":0,"type":"x"}\n')
    with pytest.raises(HistoryError, match=r"history.jsonl:2: not a JSON event"):
        list(read_history(path))


def test_missing_history(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history"):
        list(read_history(tmp_path / "nope.jsonl"))


def test_one_vocabulary_for_writers_and_readers() -> None:
    # Every stream fault a scenario can name is a FaultKind the auditor attributes and ranks (the pod
    # faults' sections: tests/unit/test_fault_kinds.py).
    assert set(get_args(StreamFaultKind)) <= set(FaultKind)
    # Every outcome the client can report has its column in intents.csv.
    assert {f"n_{o.value}" for o in Outcome} <= set(COLUMNS)
    # Every status the driver writes is one the auditor knows, and none is "not started".
    assert set(STATUS_BY_NAME) == {s.value for s in IntentStatus}
    assert ClientStatus.NOT_STARTED not in STATUS_BY_NAME.values()


def test_excerpt_is_one_bounded_line() -> None:
    assert excerpt("a\n  b\tc") == "a b c"
    long = excerpt("y" * 1000)
    assert len(long) == MESSAGE_LIMIT
    assert long.endswith("…")


def test_secrets_never_reach_the_history(tmp_path: Path) -> None:
    secret = 'tok-"quoted"\\slash-ünï'
    path = tmp_path / "history.jsonl"
    echoed = (
        f"bad token {secret} json {orjson.dumps(secret).decode()} repr {secret!r} "
        f"latin-1 {secret.encode().decode('latin-1')}"
    )
    with HistoryWriter(path, redact=Redactor([secret, "type", "2026"]).text) as h:
        h.emit_fields(
            EventType.RUN_STARTED, seed=20260728, scenario="type-2026"
        )  # identifiers stay as they are
        h.emit_fields(EventType.ATTEMPT_ENDED, message="x" * 290 + secret, outcome="auth_error")
        h.emit_fields(EventType.RUN_ENDED, reason=f"HTTP 401: {echoed}")
    raw = path.read_bytes()
    assert b"tok-" not in raw
    assert b"\\xc3" not in raw  # no UTF-8-as-Latin-1 remains either
    started, attempt, ended = read_history(path)
    assert (started["type"], started["seed"], started["scenario"]) == ("run_started", 20260728, "type-2026")
    assert attempt["message"] == "x" * 290 + "***"  # redacted before the cut: no half secret left
    assert ended["reason"] == "HTTP 401: bad token *** json \"***\" repr '***' latin-1 ***"
    assert Redactor([secret]).text(f"x {secret} y") == "x *** y"


def test_what_a_crash_point_captured_is_redacted_in_every_form(tmp_path: Path) -> None:
    """A server that writes its token into an INSERT's literals, or sends it as a downstream key: the
    history (and so every report read from it) has none of its forms; the label a plan matches by stays."""
    token = "tok-live-5f3a9c"
    redactor = Redactor([token])
    b64 = base64.b64encode(token.encode()).decode()
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, redact=redactor.text) as history:
        history.emit(
            CrashPoint(
                intent=1,
                attempt=1,
                point="db_commit#1",
                held=True,
                statements=[f"INSERT INTO audit (note) VALUES ('{token}')", f"SELECT '{b64}'"],
                label="INSERT audit",
                key=json.dumps({"k": token}),
            )
        )
        history.emit(CrashPoint(intent=1, attempt=2, point="response", held=False, answer="HTTP 404"))
    text = path.read_text()
    assert token not in text
    assert b64 not in text
    first, second = (json.loads(line) for line in text.splitlines())
    assert first["statements"] == ["INSERT INTO audit (note) VALUES ('***')", "SELECT '***'"]
    assert first["label"] == "INSERT audit"
    assert "key" in first
    assert second["answer"] == "HTTP 404"
    assert "statements" not in second
