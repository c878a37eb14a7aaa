"""Whether an ok reply's text reads as a failure (harness.replies): true and false examples.

It errs on precision: a false "failure" would blame a lost write on the wrong cause.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.replies import _FAILURE, READ_CHARS, reads_as_failure


@pytest.mark.parametrize(
    "text",
    [
        "Database error: no such table: notes",
        "Error: the note could not be saved",
        "ERROR 1205: lock wait timeout",
        "error executing tool add_note",
        "[error] disk full",
        '{"error": "quota exceeded"}',
        "Failed to create the entity",
        "failure: upstream unavailable",
        "Exception while saving",
        "Internal server error",
        "Sorry, I cannot do that right now",
        "Unable to reach the store",
        "Cannot write to a read-only file system",
        "Could not open the file",
        "No such file or directory",
        "Not found: invoice 17",
        "Permission denied",
        "Access denied for user",
        "Invalid amount: -3",
        "Traceback (most recent call last):",
        "Saved nothing. ValueError: bad date",
        "Nothing stored: sqlite3.OperationalError: database is locked",
        "write skipped (no such table: notes)",
        # Structured, in any language: the shape says it, not the words.
        '{"success": false, "message": "写入失败"}',
        '{"ok": false, "mensaje": "no se pudo guardar"}',
        '{"status": "error", "detail": "Datenbank nicht erreichbar"}',
        '{"id": null, "errors": [{"code": "E42"}]}',
        '{"result": null, "isError": true}',
    ],
)
def test_failures(text: str) -> None:
    assert reads_as_failure(text)


@pytest.mark.parametrize(
    "text",
    [
        "Created note 'Error handling tips'",
        "Created note 7: Failed builds and how to fix them",
        "Note 'Sorry state of affairs' saved",
        "Invoice inv-17 created for 1200 cents",
        '[{"name": "Error log", "entityType": "file", "observations": []}]',
        '{"id": 3, "errors": []}',
        "No notes found",
        "Deleted 0 notes",
        "ok",
        "",
        "Added the observation 'invalid input is rejected'",
        "Entity created; it cannot be renamed later",
        '{"status": "created", "id": 4}',
        '{"success": true, "message": "已保存"}',
        '{"ok": true}',
    ],
)
def test_successes(text: str) -> None:
    assert not reads_as_failure(text)


def test_only_the_first_characters_are_read() -> None:
    assert not reads_as_failure("x" * READ_CHARS + " Database error: gone")
    assert reads_as_failure("Database error: " + "x" * 10 * READ_CHARS)


# The quick look before the pattern never changes the answer.

WORDS = [
    "Error", "error:", "FAILED", "failure", "Exception", "ValueError:", "sorry", "Unable to", "cannot",
    "can't", "could not", "couldn't", "no such", "no\n such table", "not  found", "Access denied",
    "permission\tdenied", "forbidden", "Invalid", "Traceback", "Created", "note", "ok", "[ERROR]",
    '{"error":', "Write failed", "tips", "Ünïcode", "İ", "ß", "42", " ", "\n", "'", "Upload error",
    "\u017forry", "\u0130nvalid", "\u212aey error:",  # a long s, a dotted capital I, a Kelvin sign
]  # fmt: skip


@given(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join) | st.text(max_size=300))
def test_the_quick_look_agrees_with_the_pattern(text: str) -> None:
    assert reads_as_failure(text) == (_FAILURE.search(text[:READ_CHARS]) is not None)


def test_a_structured_failure_is_read_from_the_structured_content_whole() -> None:
    """A JSON reply longer than the excerpt the history keeps is still read whole for its structure."""
    from harness.client.messages import interpret_message

    body = '{"success": false, "detail": "' + "x" * 5000 + '"}'
    msg = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": body}]}}
    assert interpret_message(msg, 1, status=200, form="json").reads_as_failure
    structured = {"success": False, "message": "失败"}
    msg = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "done"}], "structuredContent": structured},
    }
    assert interpret_message(msg, 1, status=200, form="json").reads_as_failure


def test_replies_of_one_kind_share_a_shape_in_any_language() -> None:
    from harness.replies import reply_shape

    assert reply_shape("已创建笔记 3：a1b2c3d4-m0000007") == reply_shape("已创建笔记 17：a1b2c3d4-m0000123")
    assert reply_shape("已创建笔记 3：x") != reply_shape("错误：数据库暂时不可用，笔记未保存")
