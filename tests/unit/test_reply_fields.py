"""What the client keeps of an ok reply, and how the history writes it (redacted, then cut)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.client.messages import REPLY_WINDOW, interpret_message
from harness.history import MESSAGE_LIMIT, EventType, HistoryWriter, Outcome, read_history
from harness.redaction import Redactor


def ok(*blocks: dict[str, Any], **result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "result": {"content": list(blocks), **result}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def test_an_ok_reply_keeps_its_text_and_says_whether_it_reads_as_a_failure() -> None:
    res = interpret_message(ok(text("Database error:\n no such table: notes")), 7, status=200, form="json")
    assert (res.outcome, res.reply, res.reads_as_failure) == (
        Outcome.OK,
        "Database error:\n no such table: notes",  # as said: the history redacts it, then makes it one line
        True,
    )
    res = interpret_message(ok(text("Created note 'Error handling tips'")), 7, status=200, form="json")
    assert (res.reply, res.reads_as_failure) == ("Created note 'Error handling tips'", False)


def test_text_blocks_make_the_reply_else_the_structured_content() -> None:
    res = interpret_message(
        ok({"type": "image", "data": "..."}, text("saved"), text("as 42")), 7, status=200, form="json"
    )
    assert res.reply == "saved as 42"
    res = interpret_message(ok(structuredContent={"id": 1}), 7, status=200, form="json")
    assert (res.reply, res.reads_as_failure) == ('{"id":1}', False)  # structured only: that is the reply
    res = interpret_message(ok(), 7, status=200, form="json")
    assert (res.reply, res.reads_as_failure) == (None, False)


def test_a_huge_reply_is_kept_only_as_far_as_the_history_can_use_it() -> None:
    res = interpret_message(ok(text("y" * 1_000_000)), 7, status=200, form="json")
    assert res.reply == "y" * REPLY_WINDOW


def test_the_history_redacts_a_reply_then_cuts_it(tmp_path: Path) -> None:
    secret = "tok-123"
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, redact=Redactor([secret]).text) as history:
        history.emit_fields(EventType.ATTEMPT_ENDED, outcome="ok", reply="z" * 296 + secret + "z" * 100)
    (event,) = read_history(path)
    assert event["reply"] == "z" * 296 + "***" + "…"
    assert len(event["reply"]) == MESSAGE_LIMIT
