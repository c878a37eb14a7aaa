"""The benchmarks' own scenarios still validate: a stricter scenario model must not break make bench."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench import audit, restart
from harness.auditing import audit_and_report


@pytest.mark.parametrize("runtime", ["process", "docker"])
def test_the_restart_benchmark_scenario_is_valid(runtime: str) -> None:
    assert restart._scenario(runtime).name == "bench-restart"


def test_the_audit_benchmark_synthesises_an_auditable_run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        audit.synthesize(run_dir, 200)
        result = audit_and_report(run_dir, html=False)
        assert result.summary.intents.started == 200
