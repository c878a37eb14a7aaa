"""report.html's plots draw no TeX: matplotlib builds its mathtext parser the first time a label
needs it, a tenth of a second of one core after the audit (a log scale's own labels, 10^k, did)."""

from __future__ import annotations

import base64

import matplotlib.mathtext
import pandas as pd
import pytest

from harness.report import html, pages


def test_the_attempts_plot_labels_its_log_scale_in_plain_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_tex(*args: object, **kwargs: object) -> None:
        raise AssertionError("a label was drawn as TeX")

    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", no_tex)
    intents = pd.DataFrame({"attempts": [1] * 9700 + [2] * 290 + [3] * 9 + [4]})
    uri = html.plot_attempts(intents)
    assert base64.b64decode(uri.split(",", 1)[1]).startswith(b"\x89PNG")
    assert pages.counts_format()(1_000_000.0, 0) == "1,000,000"
