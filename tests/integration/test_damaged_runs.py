"""Damaged run directories: each damage is a one-line audit error (exit 4), never a traceback or a
silent wrong answer. The run is real (a few intents against the reference target, effects taken by
a read tool into effects.json); each case damages a copy of it the way disks, editors and people do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from harness.cli import main
from tests.helpers.scenarios import invoice_scenario, run_scenario

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = invoice_scenario(mode="atomic", intents=4)
    data["audit"] = {
        "effects": {"tool": {"tool": "count_invoices", "arguments": {"memo_prefix": "{namespace}"}}}
    }
    return run_scenario(data, tmp_path_factory.mktemp("results")).run_dir


def _history(run_dir: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (run_dir / "history.jsonl").read_bytes().splitlines()]


def _rewrite(run_dir: Path, change: Callable[[dict[str, object]], None]) -> None:
    events = _history(run_dir)
    for event in events:
        change(event)
    (run_dir / "history.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))


def _intent(value: int) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        def change(event: dict[str, object]) -> None:
            if event.get("intent") == 1:
                event["intent"] = value

        _rewrite(run_dir, change)

    return damage


def _truncate(name: str, keep: int) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        path = run_dir / name
        path.write_bytes(path.read_bytes()[:keep])

    return damage


def _write(name: str, content: bytes) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        (run_dir / name).write_bytes(content)

    return damage


def _line(number: int, content: bytes) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        lines = (run_dir / "history.jsonl").read_bytes().splitlines(keepends=True)
        lines[number] = content
        (run_dir / "history.jsonl").write_bytes(b"".join(lines))

    return damage


def _field(type_: str, name: str, value: object) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        def change(event: dict[str, object]) -> None:
            if event["type"] == type_:
                event[name] = value

        _rewrite(run_dir, change)

    return damage


def _drop_attempt_started(run_dir: Path) -> None:
    lines = (run_dir / "history.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "history.jsonl").write_bytes(b"".join(x for x in lines if b'"attempt_started"' not in x))


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "effects-truncated": (_truncate("effects.json", 30), "effects.json is damaged (JSONDecodeError"),
    "effects-not-counts": (_write("effects.json", b'{"effects": {"m": "many"}}'), "effects.json is damaged"),
    "effects-negative": (_write("effects.json", b'{"effects": {"m": -2}}'), "a negative count of effects"),
    "effects-missing": (lambda d: (d / "effects.json").unlink(), "ended before that final read"),
    "intent-huge": (_intent(10**12), "intent 1000000000000 is not one of the run's 4 intents"),
    "intent-negative": (_intent(-1), "intent -1 is not one of the run's 4 intents"),
    "intent-a-string": (_intent("1"), "malformed history event"),  # type: ignore[arg-type]
    "line-not-json": (_line(3, b"{not json\n"), "history.jsonl:4: not a JSON event"),
    "line-not-an-event": (_line(3, b"[1, 2]\n"), "malformed history event"),
    "attempt-without-start": (_drop_attempt_started, "without its attempt_started"),
    "attempt-ended-soon": (_field("attempt_ended", "t", "soon"), "t 'soon' is not a time in seconds"),
    "run-ended-soon": (_field("run_ended", "t", "soon"), "t 'soon' is not a time in seconds"),
    "outcome-unknown": (
        _field("attempt_ended", "outcome", "eventually"),
        "outcome 'eventually' is not one of ok, tool_error",
    ),
    "scenario-damaged": (
        _write("scenario.yaml", b"name: [\n"),
        "the run's copy of its scenario cannot be read",
    ),
    "scenario-emptied": (_write("scenario.yaml", b""), "the run's copy of its scenario cannot be read"),
    # An emptied history used to audit as "exactly once: 0 of 0", and pass its gate.
    "history-emptied": (_write("history.jsonl", b""), "history.jsonl: it holds no event"),
    "history-one-torn-line": (_write("history.jsonl", b'{"seq": 0, "t": 0.0, "ty'), "holds no event"),
}


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_a_damaged_run_is_a_one_line_audit_error(
    name: str, good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, message = DAMAGES[name]
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    damage(run_dir)
    assert main(["audit", str(run_dir)]) == 4
    err = capsys.readouterr().err
    assert err.startswith("mcp-chaos: error: "), err
    assert err.count("\n") == 1, err
    assert message in err
    if "history" in name or name.startswith(("attempt", "run", "outcome", "intent", "line")):
        assert f"{run_dir / 'history.jsonl'}:" in err  # the file and its line


def test_the_undamaged_copy_audits(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    assert main(["audit", str(run_dir)]) == 0
    assert "exactly_once |       4 |" in capsys.readouterr().out


def test_a_torn_last_line_is_a_harness_killed_mid_write_and_audits(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    history = run_dir / "history.jsonl"
    history.write_bytes(history.read_bytes() + b'{"seq": 999, "t": 1.0, "ty')
    assert main(["audit", str(run_dir)]) == 0
    assert "exactly_once |       4 |" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["history.jsonl", "summary.json", "scenario.yaml"])
def test_an_output_that_names_a_file_of_the_run_is_refused_and_the_run_kept(
    name: str, good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export-otlp RUN --file RUN/history.jsonl`` truncated the history to 0 bytes and said it exported;
    ``export`` refuses it in either format."""
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    before = (run_dir / name).read_bytes()
    assert main(["export", str(run_dir), "--format", "jepsen", "--file", str(run_dir / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"is {name} of the run {run_dir.resolve()}, a file of the run this would destroy" in err
    assert (run_dir / name).read_bytes() == before


def test_a_pod_log_linked_to_a_file_outside_the_run_is_not_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run directory is data: with ``pods/pod-0.log`` a symlink to a file elsewhere, the audit quoted
    that file's error-looking lines into report.md, report.html and summary.json."""
    data = invoice_scenario(mode="atomic", intents=8, kills={"count": 1, "hold_dispatch": True})
    run_dir = run_scenario(data, tmp_path / "results").run_dir
    log = run_dir / "pods" / "pod-0.log"
    started = [line for line in log.read_text().splitlines() if line.startswith("--- pod-0: start")]
    outside = tmp_path / "elsewhere.txt"
    outside.write_text(f"{started[0]}\nERROR: OUTSIDE-THE-RUN line one\n{started[1]}\nERROR: OUTSIDE again\n")
    log.unlink()
    log.write_text(outside.read_text())  # the same lines, as a file of the run: quoted
    assert main(["audit", str(run_dir)]) == 0
    assert "OUTSIDE-THE-RUN" in (run_dir / "summary.json").read_text()
    log.unlink()
    log.symlink_to(outside)  # a link out of the run: never read
    assert main(["audit", str(run_dir)]) == 0
    for report in ("summary.json", "report.md", "report.html"):
        assert "OUTSIDE" not in (run_dir / report).read_text(), report
    capsys.readouterr()


@pytest.mark.parametrize("intent", ["99999999999999999999", "-1"])
def test_explain_of_no_intent_index_is_a_usage_error(
    intent: str, good_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 20-digit index ended in pyarrow's OverflowError traceback."""
    assert main(["explain", str(good_run), "--", intent]) == 2
    err = capsys.readouterr().err
    assert err == f"mcp-chaos: error: explain: intent {intent} is no intent's index (they count from 0)\n"


def _link_to_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    ("record", "make", "message"),
    [
        ("history.jsonl", _link_to_dev_zero, "history.jsonl is a symbolic link, not the file the run wrote"),
        ("history.jsonl", _fifo, "history.jsonl is a FIFO, not the file the run wrote"),
        ("history.jsonl", _directory, "history.jsonl is a directory, not the file the run wrote"),
        ("scenario.yaml", _link_to_dev_zero, "scenario.yaml is a symbolic link, not the file the run wrote"),
        ("scenario.yaml", Path.unlink, "has no scenario.yaml: a run directory needs both"),
        ("history.jsonl", Path.unlink, "has no history.jsonl: a run directory needs both"),
    ],
    ids=["history-dev-zero", "history-fifo", "history-dir", "scenario-link", "no-scenario", "no-history"],
)
@pytest.mark.parametrize("command", ["audit", "explain", "export"])
def test_a_record_that_is_not_the_runs_file_is_named_not_read(
    record: str,
    make: Callable[[Path], None],
    message: str,
    command: str,
    good_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A history linked to /dev/zero, a FIFO or a directory, or a run without its scenario.yaml, all
    read "stopped at its preflight" (the run had a preflight directory beside them)."""
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    shutil.copytree(good_run, run_dir / "x.preflight")  # what made every case read as a stopped preflight
    make(run_dir / record)
    argv = [command, str(run_dir)] + (
        ["0"] if command == "explain" else ["--format", "otlp", "--file", str(tmp_path / "o")]
    )
    assert main(argv[:2] if command == "audit" else argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert message in err
    assert "preflight" not in err


def test_an_export_to_a_full_disk_is_a_one_line_error(
    good_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export-otlp --file /dev/full`` ended in an OSError traceback; so would have Jepsen's format."""
    assert main(["export", str(good_run), "--format", "otlp", "--file", "/dev/full"]) == 5
    err = capsys.readouterr().err
    assert err == "mcp-chaos: error: cannot write the spans to /dev/full: No space left on device\n"
    assert main(["export", str(good_run), "--format", "jepsen", "--file", "/dev/full"]) == 5
    err = capsys.readouterr().err
    assert err == "mcp-chaos: error: cannot write the history to /dev/full: No space left on device\n"


@pytest.mark.parametrize("way", ["pods-folder-linked-out", "pod-name-climbing-out"])
def test_a_pod_log_reached_out_of_the_run_is_not_quoted(
    way: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the log itself was checked for a link: with ``pods/`` a link to a folder elsewhere, or a
    history whose faults name the pod ``../../elsewhere/pod-0``, the audit quoted that folder's
    ``pod-0.log`` into report.md, report.html and summary.json."""
    data = invoice_scenario(mode="atomic", intents=8, kills={"count": 1, "hold_dispatch": True})
    run_dir = run_scenario(data, tmp_path / "results").run_dir
    log = (run_dir / "pods" / "pod-0.log").read_text()
    started = [line for line in log.splitlines() if line.startswith("--- pod-0: start")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    text = f"{started[0]}\nERROR: OUTSIDE-THE-RUN line one\n{started[1]}\nERROR: OUTSIDE again\n"
    (elsewhere / "pod-0.log").write_text(text)
    if way == "pods-folder-linked-out":
        shutil.rmtree(run_dir / "pods")
        (run_dir / "pods").symlink_to(elsewhere)
    else:

        def climb(event: dict[str, object]) -> None:
            if event.get("pod") == "pod-0":
                event["pod"] = "../../../elsewhere/pod-0"

        _rewrite(run_dir, climb)
        assert (run_dir / "pods" / "../../../elsewhere/pod-0.log").resolve() == elsewhere / "pod-0.log"
    assert main(["audit", str(run_dir)]) == 0
    for report in ("summary.json", "report.md", "report.html"):
        assert "OUTSIDE" not in (run_dir / report).read_text(), report
    capsys.readouterr()


@pytest.mark.parametrize("command", ["compare", "run"])
def test_an_output_the_disk_refuses_after_the_work_is_a_one_line_error(
    command: str, good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compare -o /dev/full``, ``run --junit /dev/full`` (and ``crashpoints --json``, ``contract
    --junit``, ``trend -o``) ended in an OSError traceback once the work was done, exit 1."""
    if command == "compare":
        argv = ["compare", str(good_run), str(good_run), "-o", "/dev/full"]
        flag = "-o"
    else:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(orjson.dumps(invoice_scenario(intents=2)).decode())
        argv = [
            "run",
            str(scenario),
            "--results",
            str(tmp_path / "r"),
            "--no-preflight",
            "--junit",
            "/dev/full",
        ]
        flag = "--junit"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err.splitlines()[-1]
        == f"mcp-chaos: error: {flag} /dev/full: cannot be written (No space left on device)"
    )
    assert "Traceback" not in err
