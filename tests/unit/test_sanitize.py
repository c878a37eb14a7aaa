"""The sanitizers, one per kind of output, and the list of the harness's writers: a new writer
fails :func:`test_every_writer_is_known` until it is placed here with the sanitizer it uses."""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from harness.report.junit import Case, document
from harness.sanitize import bounded_data, cell, json_safe, markdown, terminal, xml
from tests.helpers.paths import ROOT

HOSTILE = "\x1b[2J\x1b]0;t\x07<img src=x onerror=alert(1)> ![x](http://127.0.0.1/x) a|b\nc\x00\ufffe\ud800"


def test_each_sanitizer_disarms_what_its_output_fears() -> None:
    assert "\x1b" not in terminal(HOSTILE)
    assert "\n" in terminal(HOSTILE)  # a line break is not a control sequence
    shown = cell(HOSTILE)
    assert "\n" not in shown
    assert "<img" not in shown.replace("\\<img", "")
    assert "![" not in shown
    assert "|" not in shown.replace("\\|", "")
    assert markdown("a [b](c)") == "a \\[b\\](c)"
    assert "\ufffe" not in xml(HOSTILE)
    assert "\ud800" not in json_safe({"k": [HOSTILE]})["k"][0]


def test_evidence_is_cut_to_excerpts() -> None:
    cut = bounded_data({"handle": "h" * 10_000_000, "items": list(range(200))})
    assert len(cut["handle"]) == 2000
    assert len(cut["items"]) == 51


@given(text=st.text(), name=st.text())
def test_a_junit_document_parses_whatever_the_server_said(text: str, name: str) -> None:
    cases = [Case(name, failure=text, details=text), Case("e", error=text), Case("s", skipped=text)]
    ET.fromstring(document(text, name, cases, 1.0).encode("utf-8", "surrogatepass"))


WRITERS = {
    ("harness.balancer", "start"): "nginx's own configuration",
    ("harness.cli.common", "say"): "terminal()",
    ("harness.cli.init", "_ask"): "the harness's question; the tool names went through say",
    ("harness.cli.common", "preflight_call"): "a harness line, then say",
    ("harness.cli.contract", "_catalog_cost"): "token counts the harness measured",
    ("harness.cli.outputs", "append_step_summary"): "render_step_summary: in_markdown()",
    ("harness.cli.cleanup", "command"): "names the harness gave",
    ("harness.cli.contract", "command"): "junit (xml()), contract.json as written (json_safe())",
    ("harness.cli.crashpoints", "command"): "crash_render.json_text: json_safe()",
    (
        "harness.cli.export",
        "_jepsen",
    ): "history.edn: EDN strings, quotes and backslashes escaped (data, not a terminal)",
    ("harness.cli.replay", "command"): "replay.json: json.dumps escapes every control character",
    (
        "harness.cli.races",
        "command",
    ): "its own banner (the tool's name); races.json: json_safe(); the table through say(); its JUnit: xml()",
    ("harness.cli.init", "command"): "the draft, redacted by init_scenario",
    ("harness.cli.reproduce", "command"): "a table of harness numbers",
    ("harness.cli.run", "command"): "a harness line; run_junit (xml()); report.md's remembered findings: "
    "remembered.markdown (in_markdown())",
    ("harness.cli.trend", "command"): "a harness line",
    ("harness.cli.validate", "command"): "the scenario's own name",
    ("harness.cli.__init__", "_command"): "a harness line",
    ("harness.audit.effects", "_build"): "hashes and counts of the effect source, as numbers",
    ("harness.cli.options", "explore_options"): "the notice of an old flag: the harness's own words",
    ("harness.contract.checks.catalog", "catalog"): "the snapshot: redacted, json_safe()",
    ("harness.contract.cost", "write_reports"): "token counts",
    ("harness.contract.report", "write_reports"): "markdown()/cell(), json_safe() of told() results",
    ("harness.contract.tokens", "encoding"): "the tokenizer's cache",
    ("harness.crashpoints.emit", "write_reproducers"): "generated tests",
    ("harness.crashpoints.emit", "write_tests"): "generated tests",
    ("harness.crashpoints.emit", "write_race_tests"): "generated tests: the ordering's id (a checked "
    "point name) and verdict, never a server's label",
    ("harness.crashpoints.render", "write_reports"): "crashpoints.md: markdown(), the story fenced",
    ("harness.effects.base", "write_collected"): "effects.json: counts",
    ("harness.crashpoints.fstrace", "serve"): "the tracer's JSON lines to the harness: its own words",
    ("harness.crashpoints.pgproxy", "start"): "the relay's own JSON lines, copied unread to the run's spool",
    ("harness.crashpoints.durable", "_keep_bytes"): "the data directory's own bytes, kept for the rollback",
    ("harness.history", "__init__"): "HistoryWriter: redact, then excerpt",
    ("harness.otlp", "export_file"): "OTLP JSON of the history's (redacted) ids and enums: json_safe()",
    ("harness.pods.container", "_demultiplex"): "a pod log: redact_logs / the watchdog",
    ("harness.pods.container", "_stop_locked"): "a pod log: redact_logs / the watchdog",
    ("harness.pods.kubernetes", "_save_log"): "a pod log: redact_logs / the watchdog",
    ("harness.pods.kubernetes", "collect_logs"): "a pod log: redact_logs / the watchdog",
    ("harness.pods.process", "append_log"): "a pod log: redact_logs / the watchdog",
    ("harness.pods.process", "start_logged"): "nginx's own log; PostgreSQL's: redact_logs / the watchdog",
    ("harness.pods.watchdog", "redact_logs"): "the logs, redacted",
    ("harness.pytest_plugin", "pytest_terminal_summary"): "report paths the harness made: terminal()",
    ("harness.report.compare", "write_comparison"): "counts; HTML autoescaped",
    ("harness.report.files", "commit"): "intents.csv's header when no intent started: column names",
    ("harness.report.files", "write_audit"): "report.md: in_markdown(); report.html: autoescape",
    ("harness.report.trend", "write_output"): "numbers",
    ("harness.reproduce", "write_reports"): "numbers",
    ("harness.rundir", "prepare_run_dir"): "the scenario as run: URL passwords masked",
    ("harness.sink", "start"): "the sink's own records",
    ("harness.downstream", "start"): "the proxy's own records: the path and key redacted",
    ("harness.downstream", "write_ca"): "certificates",
    (
        "harness.remembered",
        "save",
    ): "JSON (control characters escaped); the scenario as the run directory has it",
}
"""Every function of the harness that writes a file or prints, and what keeps a server's text safe there."""


def writers() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "harness").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for top in ast.parse(path.read_text(encoding="utf-8")).body:
            nodes = [top, *(top.body if isinstance(top, ast.ClassDef) else [])]
            for node in nodes:
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if any(_writes(call) for call in ast.walk(node) if isinstance(call, ast.Call)):
                    found.add((module, node.name))
    return found


def _writes(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes"):
        return True
    if isinstance(f, ast.Attribute) and f.attr in ("write_line", "write_sep"):  # pytest's terminal
        return True
    if isinstance(f, ast.Name) and f.id == "print":
        return True
    if isinstance(f, ast.Attribute) and f.attr == "write" and isinstance(f.value, ast.Attribute):
        return f.value.attr in ("stdout", "stderr")
    if isinstance(f, ast.Attribute) and f.attr == "fdopen" and len(call.args) > 1:  # os.fdopen(fd, "wb")
        mode = call.args[1]
        return isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wa")
    if isinstance(f, ast.Name) and f.id == "open" and len(call.args) > 1:
        mode = call.args[1]
        return isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wa")
    if isinstance(f, ast.Attribute) and f.attr == "open" and call.args:  # Path.open("wb")
        mode = call.args[0]
        return isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wa")
    return False


def test_every_writer_is_known() -> None:
    found = writers()
    assert found - set(WRITERS) == set(), "new writers: pass what they write through harness.sanitize"
    assert set(WRITERS) - found == set(), "writers listed here that are gone"
