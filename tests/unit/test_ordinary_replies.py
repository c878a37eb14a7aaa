"""A lost intent's reply judged against the replies of the intents the store kept
(harness/audit/ordinary.py): unusual only when the ordinary ones are many and alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from harness.audit.ordinary import MIN_STORED, OrdinaryReplies

STORED = [f"已创建笔记 {i}：a1b2c3d4-m{i:07d}" for i in range(20)]


def test_a_lost_reply_unlike_every_stored_one_is_unusual() -> None:
    ordinary = OrdinaryReplies()
    replies = pa.array([*STORED, "错误：数据库暂时不可用", "已创建笔记 99：a1b2c3d4-m0000099", ""])
    stored = np.array([True] * 20 + [False] * 3)
    ordinary.learn(replies, stored)
    assert ordinary.unusual(replies, ~stored).tolist() == [False] * 20 + [True, False, False]


def test_too_few_stored_replies_judge_nothing() -> None:
    ordinary = OrdinaryReplies()
    few = pa.array([*STORED[: MIN_STORED - 1], "错误"])
    ordinary.learn(few, np.array([True] * (MIN_STORED - 1) + [False]))
    assert not ordinary.unusual(few, np.array([False] * (MIN_STORED - 1) + [True])).any()


def test_replies_too_varied_to_have_an_ordinary_shape_judge_nothing() -> None:
    ordinary = OrdinaryReplies()
    varied = pa.array([f"note {word} stored" for word in "abcdefghijklmnopqrst"] + ["错误"])
    stored = np.array([True] * 20 + [False])
    ordinary.learn(varied, stored)
    assert not ordinary.usable
    assert not ordinary.unusual(varied, ~stored).any()
