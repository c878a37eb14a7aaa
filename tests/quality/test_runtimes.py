"""Quality: the article's experiment on the other runtimes and stores finds the same things.

The shipped scenarios, shortened: the Docker runtime (kills through the Docker
API, restarts of the same container) and the PostgreSQL store must give the
verdicts the embedded runtime gives: naive double-bills under kills, atomic never.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Verdict, read_history
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.quality

Run = Callable[[dict[str, Any]], AuditResult]


def shipped(name: str, mode: str, intents: int, kills: int) -> dict[str, Any]:
    path = ROOT / "scenarios" / name
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    if data["target"].get("command"):
        data["target"]["command"] = [
            c.replace("{scenario_dir}", str(path.parent)) for c in data["target"]["command"]
        ]
    data["target"]["env"]["INVOICES_MODE"] = mode
    data["workload"]["intents"] = intents
    data["faults"]["kill"]["count"] = kills
    return data


@pytest.mark.docker
@pytest.mark.parametrize(("mode", "expect_duplicates"), [("naive", True), ("atomic", False)])
def test_pod_kill_on_the_docker_runtime(
    run: Run, docker_image: str, mode: str, expect_duplicates: bool
) -> None:
    data = shipped("pod-kill.yaml", mode, 1000, 4)
    data["target"]["image"] = docker_image
    data["target"]["command"] = None
    result = run(data)
    s = result.summary
    assert s.injected(FaultKind.KILL) == 4
    started = [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == "pod_started"]
    assert len(started) == 5
    assert len({e["container"] for e in started}) == 1
    if expect_duplicates:
        assert s.verdicts[Verdict.DUPLICATE] >= 4
        assert s.duplicate_causes == {"kill": s.verdicts[Verdict.DUPLICATE]}
    else:
        assert s.verdicts[Verdict.EXACTLY_ONCE] == 1000


@pytest.mark.postgres
@pytest.mark.parametrize(("mode", "expect_duplicates"), [("naive", True), ("atomic", False)])
def test_pod_kill_on_postgres(run: Run, postgres_server: None, mode: str, expect_duplicates: bool) -> None:
    result = run(shipped("pod-kill-postgres.yaml", mode, 1000, 4))
    s = result.summary
    assert s.injected(FaultKind.KILL) == 4
    if expect_duplicates:
        assert s.verdicts[Verdict.DUPLICATE] >= 4
    else:
        assert s.verdicts[Verdict.EXACTLY_ONCE] == 1000
