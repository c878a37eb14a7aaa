"""The history's event types (harness/events.py) and the JSON Schema made from them (history_schema)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from harness.errors import HistoryError
from harness.events import EVENTS, AttemptEnded, CrashPoint, PodFault, RunStarted, SessionOpened, StreamFault
from harness.history import SCHEMA_VERSION, EventType, FaultKind, HistoryWriter, Outcome, read_history
from harness.history_schema import (
    CHECK_ENV,
    SCHEMA_FILE,
    check_history,
    checker,
    history_schema,
    line_errors,
    schema_text,
)


def test_the_shipped_schema_is_what_the_event_types_generate() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        f"{SCHEMA_FILE.name} is stale: an event type changed; run `make schema` and commit it"
    )


def test_every_event_type_has_a_class_and_every_class_a_definition() -> None:
    assert {cls.TYPE for cls in EVENTS} == set(EventType)
    assert [cls.TYPE for cls in EVENTS] == sorted((c.TYPE for c in EVENTS), key=list(EventType).index)
    assert set(history_schema()["$defs"]) == {cls.__name__ for cls in EVENTS}


def _started(**overrides: object) -> RunStarted:
    fields: dict[str, object] = {
        "run_id": "r",
        "scenario": "s",
        "seed": 7,
        "intents": 3,
        "concurrency": 1,
        "runtime": "process",
        "namespace": "n",
        "faults_planned": {"kill": 1},
        "started_at": "2026-12-07T00:00:00+00:00",
        "version": "0",
        "keyed": True,
        "kill_signal": "SIGKILL",
        "stream_rules": [{"fault": "stall", "intent": 2, "probability": None}],
        **overrides,
    }
    return RunStarted(**fields)  # type: ignore[arg-type]


def test_run_started_carries_the_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, check=check_history) as history:
        history.emit(_started())
    (event,) = read_history(path)
    assert event["schema"] == SCHEMA_VERSION == history_schema()["x-schema-version"]
    assert "epoch_s" not in event  # optional and None: left out, never null


def test_a_required_field_is_written_null_and_an_optional_one_left_out(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, check=check_history) as history:
        history.emit(SessionOpened(session=None, version="2025-06-18", client="c0"))
        history.emit(AttemptEnded(intent=0, attempt=1, id=1, outcome=Outcome.OK, reply="done"))
    opened, ended = read_history(path)
    assert opened == {
        "seq": 0,
        "t": opened["t"],
        "type": "session_opened",
        "session": None,
        "version": "2025-06-18",
        "client": "c0",
    }
    assert set(ended) == {"seq", "t", "type", "intent", "attempt", "id", "outcome", "reply"}


def test_both_forms_of_a_fault_line_validate(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, check=check_history) as history:
        history.emit(
            PodFault(fault=FaultKind.KILL, pod="pod-0", pid=12, trigger="after 3 intents", in_flight=2)
        )
        history.emit(
            StreamFault(
                fault="sever_response", rule=0, id=4, intent=1, attempt=1, tool="t", key=None, relayed=10
            )
        )
    assert [e["fault"] for e in read_history(path)] == ["kill", "sever_response"]


@pytest.mark.parametrize(
    ("line", "wrong"),
    [
        # a misspelt field: no event has it
        ({"type": "intent_ended", "intent": 0, "status": "ok", "attemps": 1}, "attemps"),
        # a required field missing
        ({"type": "intent_ended", "intent": 0, "status": "ok"}, "attempts"),
        # a value outside its enum
        ({"type": "intent_ended", "intent": 0, "status": "fine", "attempts": 1}, "fine"),
        # a type no event has
        ({"type": "intent_paused", "intent": 0}, "intent_paused"),
        # an optional field written null: a writer leaves it out instead
        ({"type": "attempt_started", "intent": 0, "attempt": 1, "id": 1, "key": "k", "pod": None}, "pod"),
        # a field of a pod fault on a stream fault's line (neither form takes it)
        (
            {"type": "fault", "fault": "stall", "rule": 0, "id": 1, "intent": 0, "attempt": 1, "tool": "t",
             "key": None, "pod": "pod-0"},
            "fault",
        ),
    ],
)  # fmt: skip
def test_a_wrong_line_fails_validation(tmp_path: Path, line: dict[str, object], wrong: str) -> None:
    event = {"seq": 0, "t": 0.0, **line}
    errors = list(line_errors(event))
    assert errors
    assert wrong in " ".join(errors)
    path = tmp_path / "history.jsonl"
    path.write_bytes(orjson.dumps(event) + b"\n")
    with pytest.raises(
        HistoryError, match=r"history\.jsonl:1: a .* line does not match history\.schema\.json"
    ):
        check_history(path)


def test_a_writer_with_the_check_fails_on_close_for_a_line_the_types_do_not_describe(tmp_path: Path) -> None:
    history = HistoryWriter(tmp_path / "history.jsonl", check=check_history)
    history.emit(CrashPoint(intent=0, attempt=1, point="response", held=False))
    history.emit_fields(EventType.INTENT_ENDED, intent=0, status="ok", attempts=1, why="typo")
    with pytest.raises(HistoryError, match=r":2: a intent_ended line .*'why' was unexpected"):
        history.close()


def test_a_misspelt_field_is_refused_when_the_event_is_made() -> None:
    with pytest.raises(TypeError, match="pods"):
        PodFault(fault=FaultKind.KILL, pods="pod-0", pid=1, trigger="t")  # type: ignore[call-arg]


def test_the_check_is_on_only_where_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECK_ENV, "1")
    assert checker() is check_history
    monkeypatch.setenv(CHECK_ENV, "")
    assert checker() is None


def test_every_field_is_described_where_it_needs_words() -> None:
    schema = json.loads(schema_text())
    assert schema["$defs"]["RunStarted"]["properties"]["schema"]["description"].startswith("The version")
    assert schema["$defs"]["AttemptEnded"]["properties"]["code"]["type"] == ["string", "integer"]
