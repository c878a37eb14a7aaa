"""A lost intent's reply judged against the tool's ordinary replies: a failure said in any language.

A server that answers a failure as a success ("错误 数据库不可用", isError false) loses the
intent while the client counts an ok, and no list of words covers every language it
may say so in. The run itself shows what the tool's success looks like: the replies
of the intents the store kept. Their shapes (:func:`harness.replies.reply_shape`: the
reply with its markers, ids and numbers blanked) are few when the tool answers alike
each time; a lost intent whose reply has none of those shapes was not answered the way a
success is, and its loss is the server's answer (``error_as_success``), not a silent
one. Precise rather than eager: with too few stored replies, or replies too varied to
have an ordinary shape, it says nothing.

Bounded: shapes are learnt from the first :data:`LEARN` stored replies (the tool's
ordinary replies do not change over a run), and only lost intents are looked at.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from harness.replies import reply_shape

LEARN = 2000
"""Stored replies the ordinary shapes are learnt from."""
MIN_STORED = 5
"""Stored replies needed before any reply is judged unusual."""
MAX_SHAPES = 20
"""More ordinary shapes than this (and than a tenth of the stored replies): too varied to judge by."""


class OrdinaryReplies:
    """The shapes of the tool's replies to the intents the store kept, and the lost replies unlike them."""

    def __init__(self) -> None:
        self.shapes: Counter[str] = Counter()
        self.stored = 0

    def learn(self, replies: pa.ChunkedArray | pa.Array, stored: npt.NDArray[np.bool_]) -> None:
        """Take the replies of the rows ``stored`` marks (acknowledged, and found in the store)."""
        room = LEARN - self.stored
        if room <= 0:
            return
        rows = np.flatnonzero(stored)[:room]
        for text in replies.take(pa.array(rows, pa.int64())).to_pylist():
            if text:
                self.shapes[reply_shape(text)] += 1
                self.stored += 1

    @property
    def usable(self) -> bool:
        """Enough stored replies, alike enough, to have an ordinary shape."""
        return self.stored >= MIN_STORED and len(self.shapes) <= min(MAX_SHAPES, max(1, self.stored // 10))

    def unusual(
        self, replies: pa.ChunkedArray | pa.Array, lost: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """Of the rows ``lost`` marks, those whose reply has none of the ordinary shapes."""
        found = np.zeros(len(lost), dtype=bool)
        if not self.usable or not lost.any():
            return found
        rows = np.flatnonzero(lost)
        for row, text in zip(rows, replies.take(pa.array(rows, pa.int64())).to_pylist(), strict=True):
            found[row] = bool(text) and reply_shape(text) not in self.shapes
        return found
