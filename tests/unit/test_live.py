"""The live status: a redrawn rich panel where a terminal is attached, a plain repeated line otherwise."""

from __future__ import annotations

import io

import pytest

from harness.report.live import LiveStatus, Snapshot


class Terminal(io.StringIO):
    """What a terminal looks like to the status: a stream that says it is a tty."""

    def isatty(self) -> bool:
        return True


def snap(finished: int, **kw: object) -> Snapshot:
    fields: dict[str, object] = {
        "t": 1.5,
        "finished": finished,
        "planned": 40,
        "attempts": finished + 3,
        "in_flight": 2,
        "pod_faults_done": 1,
        "pod_faults_planned": 4,
        "pods_ready": 1,
    }
    fields.update(kw)
    return Snapshot(**fields)  # type: ignore[arg-type]


def test_the_plain_line_names_every_number_a_watcher_wants() -> None:
    line = snap(10, stream_faults=7, ambiguous=3, gave_up=1, tool_errors=2, pods_ready=0, holding=True).line()
    for part in (
        "intents 10/40 (25%)",
        "attempts 13",
        "in flight 2",
        "pod faults 1/4",
        "stream faults 7",
        "ambiguous 3",
        "gave up 1",
        "tool errors 2",
        "pod DOWN",
        "holding for a fault",
    ):
        assert part in line, (part, line)
    assert "stream faults" not in snap(10).line()  # no proxy, no stream count


def test_without_a_terminal_each_show_is_one_plain_line_without_escapes() -> None:
    out = io.StringIO()
    live = LiveStatus(out, interval_s=1.0)
    assert live.interval_s == 5.0  # CI logs get a line per 5 s at most
    live.show(snap(10))
    live.show(snap(20))
    live.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "intents 20/40" in lines[1]
    assert "\x1b" not in out.getvalue()


def test_on_a_terminal_the_panel_is_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Terminal()
    live = LiveStatus(out, interval_s=0.25)
    assert live.interval_s == 0.25
    live.show(snap(10, ambiguous=3))
    first = out.getvalue()
    live.show(snap(40, stream_faults=5, ambiguous=4, gave_up=1))
    live.finish()
    text = out.getvalue()
    later = text[len(first) :]
    assert later.startswith("\r\x1b[2K\x1b[1A")  # back up over the previous panel, then redraw it
    assert "10/40 intents (25%)" in first
    assert "40/40 intents (100%)" in later
    assert "pod 1/4 · stream 5" in later
    assert "4 ambiguous attempts · 1 gave up · 0 tool errors" in later
    assert "the audit counts effects" in later  # a live count is never presented as a verdict


def test_a_dumb_terminal_gets_the_plain_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    out = Terminal()
    live = LiveStatus(out, interval_s=1.0)
    live.show(snap(5))
    assert out.getvalue().startswith("[")
    assert "intents 5/40" in out.getvalue()
