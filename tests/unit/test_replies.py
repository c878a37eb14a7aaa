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
