"""The quick look before the pattern never changes what ``reads_as_failure`` says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness.replies import _FAILURE, READ_CHARS, reads_as_failure

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
