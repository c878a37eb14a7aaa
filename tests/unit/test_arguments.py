"""The argument readers both front ends share (the command line and the pytest plugin)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.arguments import ids, pairs
from harness.errors import UsageError

ID = st.text(st.characters(blacklist_characters=","), min_size=1).map(str.strip).filter(bool)
"""An id as a user gives it: no comma, nothing str.strip() takes (U+2028 and U+0085 are whitespace too)."""


@given(st.lists(ID, max_size=6), st.sampled_from(["", " ", "  "]))
def test_ids_read_back_whatever_spacing_joins_them(given_ids: list[str], space: str) -> None:
    assert ids((space + "," + space).join(given_ids) + ",") == given_ids


def test_a_pair_keeps_an_environment_value_exactly_and_strips_a_header_value() -> None:
    assert pairs([" A = b ", "C=d=e"], "=", "--env") == {"A": " b ", "C": "d=e"}
    assert pairs(["Authorization: Bearer ${T}"], ":", "--header") == {"Authorization": "Bearer ${T}"}
    assert pairs(None, "=", "--env") == {}


@pytest.mark.parametrize("bad", ["NAME", "=value", " =value"])
def test_a_pair_without_a_name_is_named_by_its_flag(bad: str) -> None:
    with pytest.raises(UsageError, match=f"--crash-env {bad!r} is not NAME=VALUE"):
        pairs(["A=1", bad], "=", "--crash-env")
