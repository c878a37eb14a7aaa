"""The contract's checks as a registry: every module registers one check, a selection brings what a
chosen check judges, judges run last, and a check never judges what did not run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harness.contract.checks import CHECKS, MODULES, select
from harness.contract.framework import Check, CheckResult, CheckVerdict, Options, Seen, choose, in_order
from harness.errors import UsageError

CHECKS_DIR = Path(__file__).resolve().parents[2] / "harness" / "contract" / "checks"


def test_every_module_of_the_package_is_loaded_and_registers_its_check() -> None:
    on_disk = {p.stem for p in CHECKS_DIR.glob("*.py")} - {"__init__", "common"}
    assert set(MODULES) == on_disk
    assert {c.promise.__module__.rsplit(".", 1)[1] for c in CHECKS.values()} == on_disk


def test_the_judges_run_after_every_other_check() -> None:
    order = list(CHECKS)
    judges = [cid for cid in order if CHECKS[cid].judges]
    assert judges == ["error_contract", "annotations"]
    assert order[-len(judges) :] == judges


def test_a_check_chosen_alone_brings_what_it_judges() -> None:
    assert select(["annotations"], []) == ["replay", "restart_keeps_keys", "annotations"]
    assert select(["error_contract"], []) == ["replay", "error_contract"]  # an ordinary call to judge
    assert select(["annotations", "twins"], []) == ["replay", "twins", "restart_keeps_keys", "annotations"]
    assert select([], ["annotations"]) == [c for c in CHECKS if c != "annotations"]
    assert select(["annotations"], ["replay"]) == ["restart_keeps_keys", "annotations"]
    with pytest.raises(UsageError, match="unknown check nope; the checks are: replay, twins"):
        select(["nope"], [])


async def _answers(c: Check, *_: Any) -> CheckResult:
    return c.passed("judged")


def _checks(**needs: tuple[str, ...]) -> dict[str, Check]:
    return {cid: Check(cid, cid, _answers, needs=n) for cid, n in needs.items()}


def test_needs_order_the_suite_and_a_cycle_is_refused() -> None:
    checks = _checks(b=("c",), a=(), c=("a",))
    assert in_order(checks) == ["a", "c", "b"]
    assert choose(checks, ["b"], []) == ["a", "c", "b"]
    with pytest.raises(ValueError, match="checks that need each other: a -> b -> a"):
        in_order(_checks(a=("b",), b=("a",)))


class _Session:
    keyed = True
    run_dir = Path("/nonexistent")


def test_a_check_whose_needs_did_not_finish_gives_no_verdict() -> None:
    judge = Check("judge", "the judge", _answers, needs=("first", "second"))
    seen = Seen(finished={"first": CheckVerdict.ERROR})
    result = asyncio.run(judge(_Session(), Options(), seen))  # type: ignore[arg-type]
    assert result.verdict is CheckVerdict.ERROR
    assert "first (could not finish), second (not run)" in result.why
    assert "--only first,second,judge" in result.why
    seen.finished.update(first=CheckVerdict.PASS, second=CheckVerdict.FAIL)
    again = asyncio.run(judge(_Session(), Options(), seen))  # type: ignore[arg-type]
    assert (again.verdict, again.why) == (CheckVerdict.PASS, "judged")
    assert seen.finished["judge"] is CheckVerdict.PASS
