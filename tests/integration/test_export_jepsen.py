"""`mcp-chaos export --format jepsen`: a real run's history as Jepsen operations that Clojure's reader
takes (read back with a Python EDN reader), well formed as Jepsen's history is (one operation at a
time per process, a process retired after an indeterminate one), and whose final read lets Jepsen's
set-full checker find what the audit found."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import edn_format
import pytest

from harness.audit.auditor import AuditResult
from harness.history import Verdict
from tests.helpers.cli import mcp_chaos
from tests.helpers.scenarios import invoice_scenario, run_scenario

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def duplicated(tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    """The naive design, its server exiting right after its third call's commit (a failpoint): that
    call's client saw the exchange break, retried, and the invoice was made twice."""
    data = invoice_scenario(mode="naive", intents=5, env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    result = run_scenario(data, tmp_path_factory.mktemp("results"))
    assert result.intents["verdict"].tolist().count(Verdict.DUPLICATE) == 1
    return result


def read_ops(path: Path) -> list[dict[str, Any]]:
    ops = []
    for line in path.read_text(encoding="utf-8").splitlines():
        op = edn_format.loads(line)
        ops.append({str(k).lstrip(":"): _plain(v) for k, v in op.items()})
    return ops


def _plain(value: Any) -> Any:
    if isinstance(value, edn_format.Keyword):
        return str(value).lstrip(":")
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):  # edn_format's immutable map
        return {str(k).lstrip(":"): _plain(v) for k, v in value.items()}
    return value


def set_full(ops: list[dict[str, Any]]) -> tuple[set[int], set[int]]:
    """What Jepsen's set-full checker reads from a history with one final read: the elements whose add
    was acknowledged and that the read lacks (lost), and those it holds more than once (duplicated)."""
    acknowledged = {op["value"] for op in ops if op["f"] == "add" and op["type"] == "ok"}
    (read,) = [op["value"] for op in ops if op["f"] == "read" and op["type"] == "ok"]
    counts = Counter(read)
    return acknowledged - set(counts), {e for e, n in counts.items() if n > 1}


def test_a_run_exports_as_a_jepsen_history_its_checker_reads_the_findings_from(
    duplicated: AuditResult, tmp_path: Path
) -> None:
    out = tmp_path / "history.edn"
    done = mcp_chaos("export", duplicated.run_dir, "--format", "jepsen", "--file", out)
    assert done.returncode == 0, done.stderr
    ops = read_ops(out)
    assert [op["index"] for op in ops] == list(range(len(ops)))
    attempts = int(duplicated.intents["attempts"].sum())
    assert f"exported {len(ops)} operations ({attempts} attempts, 0 faults, the final read)" in done.stdout
    # Jepsen's well-formedness: a process invokes, then completes, before it invokes again; after an
    # :info it never invokes again (it may have crashed mid-operation).
    open_op: dict[int, dict[str, Any]] = {}
    retired: set[int] = set()
    for op in (o for o in ops if o["process"] != "nemesis"):
        process = op["process"]
        assert process not in retired, op
        if op["type"] == "invoke":
            assert process not in open_op, op
            open_op[process] = op
        else:
            invoked = open_op.pop(process)
            assert invoked["f"] == op["f"]
            if op["f"] == "add":
                assert invoked["value"] == op["value"]
            assert op["time"] >= invoked["time"]
            if op["type"] == "info":
                retired.add(process)
    assert not open_op
    # The attempt the failpoint broke is indeterminate (:info), its retry acknowledged.
    (duplicate,) = duplicated.intents.loc[duplicated.intents["verdict"] == Verdict.DUPLICATE, "intent"]
    ends = [op for op in ops if op["f"] == "add" and op["type"] != "invoke" and op["value"] == duplicate]
    # Then, while the server started again, retries refused at the door: certainly not applied (:fail).
    assert [op["type"] for op in ends] == ["info", *["fail"] * (len(ends) - 2), "ok"]
    assert ends[0]["outcome"] == "transport-error"
    assert {op["error"] for op in ends[1:-1]} <= {"connect-refused", "connect-failed", "connect"}
    # What set-full reads is what the audit found: one duplicated element, nothing acknowledged lost.
    lost, twice = set_full(ops)
    assert (lost, twice) == (set(), {int(duplicate)})


def test_a_run_not_audited_ends_its_read_indeterminate_and_bad_flags_are_one_line(
    duplicated: AuditResult, tmp_path: Path
) -> None:
    run_dir = tmp_path / "copy"
    shutil.copytree(duplicated.run_dir, run_dir)
    (run_dir / "intents.csv").unlink()
    done = mcp_chaos("export", run_dir, "--format", "jepsen", "--file", "-")
    assert done.returncode == 0, done.stderr
    last = _plain(edn_format.loads(done.stdout.splitlines()[-1]))
    assert (last["f"], last["type"], last["error"]) == ("read", "info", "effects-unknown")
    assert "no audit of the effects" in done.stderr
    wrong = mcp_chaos("export", run_dir, "--format", "jepsen", "--endpoint", "http://127.0.0.1:4318")
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1
    assert "--endpoint is for --format otlp" in wrong.stderr
