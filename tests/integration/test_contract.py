"""`mcp-chaos contract` against the reference target, and against versions of it built to break one
promise each: every check passes on the atomic design and fails where it should, so each can fail.
"""

from __future__ import annotations

import json
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.cli import mcp_chaos
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import invoice_scenario
from tests.helpers.third_party import IN_MEMORY, LEDGER, NO_TABLE
from tests.quality.test_file_crash_points import notes_scenario

pytestmark = pytest.mark.integration

ALL = {
    "replay",
    "twins",
    "key_reuse",
    "concurrent_same_key",
    "restart_keeps_keys",
    "crash_window",
    "crash_points",
    "mrtr",
    "handles",
    "error_contract",
    "annotations",
    "catalog",
}
CRASH = ("--crash-env", "INVOICES_FAILPOINT=after_business_commit@1")
WRONG = "SELECT customer_id AS marker, COUNT(*) AS effects FROM invoices GROUP BY customer_id"
"""An effect query that counts by the wrong column: no call's marker is found."""


def contract(
    tmp_path: Path, data: dict[str, Any], *args: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "contract.json"
    out.unlink(missing_ok=True)
    proc = mcp_chaos("contract", str(path), "--results", str(tmp_path / "r"), "--json", str(out), *args)
    return proc, json.loads(out.read_text()) if out.exists() else None


def verdicts(report: Any) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in report["checks"]}


def target(mode: str, **env: str) -> dict[str, Any]:
    # 100 ms of work before the commit: the concurrent calls all arrive while the first is in flight,
    # so what each design answers them is the same every time.
    return invoice_scenario(mode=mode, env={"INVOICES_PRE_COMMIT_MS": "100", **env})


def asking(**env: str) -> dict[str, Any]:
    """The reference target with arguments that make create_invoice ask (customer "acme"), and the answer."""
    data = target("atomic", **env)
    data["workload"]["arguments"]["customer_id"] = "acme"
    data["workload"]["answers"] = {"customer": {"customer_id": "acme-inc"}}
    return data


def demo(mode: str = "atomic", **env: str) -> dict[str, Any]:
    """The article's six-tool demo catalog; handles live a second, so the handles check sees one expire."""
    return target(mode, **{"INVOICES_CATALOG": "demo", "INVOICES_HANDLE_TTL_MS": "1000", **env})


CASES = {
    "atomic": (target("atomic"), set()),
    "keyed": (target("keyed"), {"concurrent_same_key"}),
    "naive": (target("naive"), {"replay", "key_reuse", "concurrent_same_key", "restart_keeps_keys"}),
    "payload_dedup": (target("atomic", INVOICES_FLAW="payload_dedup"), {"twins", "key_reuse"}),
    "rerender": (target("atomic", INVOICES_FLAW="rerender"), {"replay", "restart_keeps_keys"}),
    "exists_error": (target("atomic", INVOICES_FLAW="exists_error"), {"replay", "restart_keeps_keys"}),
    "memory_keys": (target("atomic", INVOICES_FLAW="memory_keys"), {"restart_keeps_keys"}),
    "sloppy_errors": (
        target("atomic", INVOICES_FLAW="sloppy_errors"),
        {"concurrent_same_key", "error_contract"},
    ),
    "apologize": (
        target("atomic", INVOICES_FLAW="apologize"),
        ALL - {"annotations", "crash_window", "crash_points", "catalog", "mrtr", "handles"},
    ),
    "idempotent_hint_lies": (target("naive", INVOICES_ANNOTATIONS="idempotent"), {"annotations"}),
    # It also takes a key while it says it only reads: the catalog's advice is broken too.
    "read_only_hint_lies": (target("atomic", INVOICES_ANNOTATIONS="readonly"), {"annotations", "catalog"}),
    "demo": (demo(), set()),
    "raw_cursor": (demo(INVOICES_FLAW="raw_cursor"), {"handles"}),
    "expired_500": (demo(INVOICES_FLAW="expired_500"), {"handles"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_design_fails_exactly_the_checks_it_should(tmp_path: Path, case: str) -> None:
    """Every check but crash_points, which explores the SQLite store's file operations (tested below)."""
    data, failing = CASES[case]
    proc, report = contract(tmp_path, data, "--skip", "crash_points")
    got = {check for check, verdict in verdicts(report).items() if verdict == "fail"}
    if case == "idempotent_hint_lies":  # naive fails the others too; this case is about annotations
        assert "annotations" in got
    else:
        assert got == failing, proc.stdout
    assert proc.returncode == (1 if got else 0), proc.stderr


def test_the_atomic_design_passes_and_says_why(tmp_path: Path) -> None:
    # The six-tool demo catalog (so handles applies), its calls asking a question first (MRTR),
    # answered by every check (so mrtr applies too): every check applies, and passes (crash_points, an
    # exploration of the SQLite store's file operations, is tested below).
    data = asking(
        INVOICES_ANNOTATIONS="idempotent",
        INVOICES_REQUEST_STATE="shared",
        INVOICES_CATALOG="demo",
        INVOICES_HANDLE_TTL_MS="1000",
    )
    proc, report = contract(
        tmp_path, data, *CRASH, "--skip", "crash_points", "--junit", str(tmp_path / "junit.xml")
    )
    assert proc.returncode == 0, proc.stderr
    assert set(verdicts(report).values()) == {"pass"}
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["concurrent_same_key"]["why"].startswith("one effect; ")
    assert "idempotency_key_in_use" in json.dumps(by_id["concurrent_same_key"]["evidence"])
    assert by_id["key_reuse"]["why"].startswith("refused: tool_error idempotency_key_reused")
    (run_dir,) = (tmp_path / "r").iterdir()
    assert "## replay: pass" in (run_dir / "contract.md").read_text()
    import xmlschema

    xmlschema.XMLSchema(str(Path(__file__).parents[1] / "schemas" / "junit.xsd")).validate(
        str(tmp_path / "junit.xml")
    )
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "11"  # every check but crash_points
    assert suite.get("failures") == "0"
    assert [case.get("name") for case in suite.iter("testcase")] == list(by_id)


def test_a_failure_carries_its_evidence_into_junit(tmp_path: Path) -> None:
    proc, _ = contract(
        tmp_path, target("naive"), "--only", "replay,twins", "--junit", str(tmp_path / "j.xml")
    )
    assert proc.returncode == 1
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "1"
    failure = suite.find("testcase[@name='replay']/failure")
    assert failure is not None
    assert failure.get("message", "").startswith("2 effects for one key: the retry did the work again")
    assert '"effects": 2' in (failure.text or "")


def test_only_and_skip_select_checks_and_unknown_ids_are_usage_errors(tmp_path: Path) -> None:
    _, report = contract(tmp_path, target("atomic"), "--skip", "restart_keeps_keys,annotations,catalog")
    assert set(verdicts(report)) == ALL - {"restart_keeps_keys", "annotations", "catalog"}
    proc, report = contract(tmp_path, target("atomic"), "--only", "replay,nope")
    assert proc.returncode == 2
    assert "unknown check nope; the checks are: replay, twins" in proc.stderr
    assert report is None


def test_a_check_chosen_alone_runs_with_the_checks_it_judges(tmp_path: Path) -> None:
    """annotations judges what replay and restart_keeps_keys did: chosen alone it used to judge an empty
    record and pass a naive tool that says idempotentHint: true ("what it declares holds")."""
    data = target("naive", INVOICES_ANNOTATIONS="idempotent")
    proc, report = contract(tmp_path, data, "--only", "annotations")
    assert list(verdicts(report)) == ["replay", "restart_keeps_keys", "annotations"]
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["annotations"]["verdict"] == "fail", proc.stdout
    assert (
        "says idempotentHint: true, and one call made again made a second effect"
        in by_id["annotations"]["why"]
    )
    # Without what it judges, no verdict: an error saying what is missing, never a pass.
    proc, report = contract(tmp_path, data, "--only", "annotations", "--skip", "restart_keeps_keys")
    assert verdicts(report) == {"replay": "fail", "annotations": "error"}
    (judged,) = [c for c in report["checks"] if c["id"] == "annotations"]
    assert "restart_keeps_keys (not run)" in judged["why"]
    assert proc.returncode == 1


def test_a_stdio_target(tmp_path: Path) -> None:
    data = target("atomic", INVOICES_TRANSPORT="stdio")
    data["target"]["transport"] = "stdio"
    proc, report = contract(tmp_path, data, "--skip", "crash_points")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(report)["restart_keeps_keys"] == "pass"


@pytest.mark.docker
def test_an_image_restarts_for_the_check_that_needs_it(tmp_path: Path, docker_image: str) -> None:
    data = target("atomic", INVOICES_FLAW="memory_keys")
    data["target"]["image"] = docker_image
    data["target"].pop("command")
    proc, report = contract(tmp_path, data, "--only", "replay,restart_keeps_keys")
    assert verdicts(report) == {"replay": "pass", "restart_keeps_keys": "fail"}, proc.stderr


@pytest.mark.docker
@pytest.mark.parametrize(("state", "verdict"), [("shared", "pass"), ("process", "fail")])
def test_mrtr_restarts_an_image_between_the_rounds(
    tmp_path: Path, docker_image: str, state: str, verdict: str
) -> None:
    # The shared key's file lies beside the store, on the data mount that the next container gets.
    data = asking(INVOICES_REQUEST_STATE=state)
    data["target"]["image"] = docker_image
    data["target"].pop("command")
    proc, report = contract(tmp_path, data, "--only", "mrtr")
    assert report is not None, proc.stderr  # the contract could not run at all: say why
    assert verdicts(report) == {"mrtr": verdict}, proc.stderr


@pytest.mark.parametrize(
    ("mode", "crash", "verdict"),
    [
        ("atomic", "after_business_commit@1", "pass"),
        ("keyed", "after_business_commit@1", "fail"),
        ("naive", "before_response@1", "fail"),
        ("atomic", "before_response@99", "not_applicable"),  # it never crashes: nothing was tested
    ],
)
def test_crash_window(tmp_path: Path, mode: str, crash: str, verdict: str) -> None:
    proc, report = contract(
        tmp_path, target(mode), "--only", "crash_window", "--crash-env", f"INVOICES_FAILPOINT={crash}"
    )
    assert verdicts(report) == {"crash_window": verdict}, proc.stdout
    (check,) = report["checks"]
    if verdict == "fail":
        assert check["why"] == "2 effects: the retry did the work again after a crash left the key unrecorded"
        assert check["evidence"]["first (crashes)"]["outcome"] == "transport_error"


def test_crash_window_without_a_way_to_crash_is_not_applicable(tmp_path: Path) -> None:
    proc, report = contract(tmp_path, target("atomic"), "--only", "crash_window")
    assert proc.returncode == 0
    assert verdicts(report) == {"crash_window": "not_applicable"}
    assert "needs --crash-env NAME=VALUE" in report["checks"][0]["why"]


def on_postgres(data: dict[str, Any]) -> dict[str, Any]:
    """The target keeping its invoices in the harness's PostgreSQL, through the proxy that holds commits."""
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    query = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": query}}}
    return data


@pytest.mark.postgres
@pytest.mark.parametrize(("mode", "verdict"), [("atomic", "pass"), ("keyed", "fail")])
def test_crash_points(tmp_path: Path, postgres_server: None, mode: str, verdict: str) -> None:
    """No failpoint: the harness holds the target at its own commits and kills it there, once each."""
    proc, report = contract(tmp_path, on_postgres(target(mode)), "--only", "crash_points")
    assert verdicts(report) == {"crash_points": verdict}, proc.stdout + proc.stderr
    assert proc.returncode == (0 if verdict == "pass" else 1)
    (check,) = report["checks"]
    points = check["evidence"]["points"]
    assert check["evidence"]["tries per point"] == 1
    assert {"request", "db_commit#1", "db_commit#2", "response"} <= set(points)
    if verdict == "pass":
        assert check["why"] == (
            "held and killed at 4 points (request, db_commit#1, db_commit#2, response), 1 proven try each: "
            "every retry took effect exactly once"
        )
        assert all(v == {"exactly_once": 1} for v in points.values())
        assert set(check["evidence"]["proven tries"].values()) == {"1/1"}
    else:  # the article's one duplicate: the commit of the invoice, after the key's lookup, before its record
        assert check["why"].startswith(
            "a crash at db_commit#2 gave duplicate in 1 of 1 proven tries (and 2 more points): db_commit#2 "
            "committed the effect ('INSERT INTO invoices"
        )
        assert points["db_commit#2"] == {"duplicate": 1}
        assert points["db_commit#1"] == points["db_commit#3"] == points["response"] == {"exactly_once": 1}
        report_md = Path(check["evidence"]["report"])
        assert check["why"].endswith(f"(one try's story and a reproducer: {report_md})")
        assert "## db_commit#2: duplicate in 1 of 1 tries" in report_md.read_text()
        assert (report_md.parent / "crashpoint-db_commit-2.yaml").is_file()


def test_crash_points_at_a_downstream_that_deduplicates_by_key(tmp_path: Path) -> None:
    """The sink is a hold point too: a target that calls it without the intent's key charges twice."""
    env = {"INVOICES_SINK_URL": "{sink_url}", "INVOICES_DOWNSTREAM": "before_commit"}
    data = target("atomic", INVOICES_FLAW="unkeyed_downstream", **env)
    data["audit"] = {"effects": {"sink": {"dedupe_by_key": True}}}
    # Kills only: with power losses the reference target's SQLite (WAL, synchronous=NORMAL) fails first.
    proc, report = contract(tmp_path, data, "--only", "crash_points", "--no-power-loss")
    assert verdicts(report) == {"crash_points": "fail"}, proc.stdout + proc.stderr
    why = report["checks"][0]["why"]
    # The points of its crash state ("and N more points") follow the first.
    assert why.startswith("a crash at downstream#1 gave duplicate in 1 of 1 proven tries"), why
    assert "): The downstream recorded" in why
    assert "its call carried no idempotency key" in why


def test_crash_points_on_a_sqlite_store_crash_before_each_of_its_file_operations(tmp_path: Path) -> None:
    """No PostgreSQL, no sink: the store's own file operations are the points. Killed before any of
    them the atomic design loses nothing (--no-power-loss); its WAL with synchronous=NORMAL is not made
    durable at each commit, which a power loss (on by default, as in crashpoints) shows."""
    data = target("atomic")
    proc, report = contract(tmp_path, data, "--only", "crash_points", "--no-power-loss")
    assert verdicts(report) == {"crash_points": "pass"}, proc.stdout + proc.stderr
    assert any(p.startswith("fs_write#") for p in report["checks"][0]["evidence"]["clean call"])
    (tmp_path / "power").mkdir()
    lost, report = contract(tmp_path / "power", data, "--only", "crash_points")
    assert verdicts(report) == {"crash_points": "fail"}, lost.stdout + lost.stderr
    assert "power loss" in report["checks"][0]["why"]


def test_crash_points_passes_a_durable_sqlite_store_with_the_default_options(tmp_path: Path) -> None:
    """SQLite with synchronous=EXTRA (its journal's deletion made durable): 19 operations a call, each
    crashed as a kill and as a power loss. Its states, not 8 of its points, are tried (it was "8 of 19
    points covered", an error that failed a correct server), and none loses or repeats a note."""
    data = notes_scenario({"NOTES_SQLITE_SYNC": "extra"}, sqlite=True)
    proc, report = contract(tmp_path, data, "--only", "crash_points")
    assert verdicts(report) == {"crash_points": "pass"}, proc.stdout + proc.stderr
    assert proc.returncode == 0
    (check,) = report["checks"]
    assert check["evidence"]["coverage"].endswith("distinct states"), check["evidence"]
    assert any(name.endswith("@power_loss") for name in check["evidence"]["points"])


def test_crash_points_checks_the_effect_source_before_it_explores(tmp_path: Path) -> None:
    """The preflight's two calls, as run makes them: an effect source that cannot see the call's effect
    is an error in seconds, not the end of an exploration."""
    data = target("atomic")
    data["audit"] = {"effects": {"sql": {"url": "sqlite:///{data_dir}/invoices.db", "query": WRONG}}}
    started = time.monotonic()
    proc, report = contract(tmp_path, data, "--only", "crash_points")
    assert verdicts(report) == {"crash_points": "error"}, proc.stdout + proc.stderr
    assert report["checks"][0]["why"].startswith("preflight: create_invoice answered OK")
    assert time.monotonic() - started < 60
    assert not list((tmp_path / "r").glob("*/crash_points/history.jsonl"))  # nothing explored


def test_crash_points_without_a_hold_point_is_not_applicable(tmp_path: Path) -> None:
    data = target("keyed")
    data["faults"] = {"crash_points": {"files": False}}  # its SQLite file, not traced
    proc, report = contract(tmp_path, data, "--only", "crash_points")
    assert proc.returncode == 0, proc.stderr
    assert verdicts(report) == {"crash_points": "not_applicable"}
    assert report["checks"][0]["why"].startswith("no hold point: the target neither reaches the harness's")
    assert not list((tmp_path / "r").glob("*/crash_points"))  # nothing was started for it


def test_the_catalog_within_budget_and_against_its_snapshot(tmp_path: Path) -> None:
    snapshot = tmp_path / "catalog.json"
    first, report = contract(tmp_path, target("atomic"), "--only", "catalog", "--snapshot", str(snapshot))
    assert first.returncode == 0, first.stdout
    (check,) = report["checks"]
    assert check["evidence"]["snapshot"] == f"written to {snapshot}"
    assert check["evidence"]["tokens"]["total"] > check["evidence"]["tokens"]["create_invoice"] > 50
    same, _ = contract(tmp_path, target("atomic"), "--only", "catalog", "--snapshot", str(snapshot))
    assert same.returncode == 0, same.stdout
    edited = json.loads(snapshot.read_text())
    edited[0]["description"] += " Edited."
    snapshot.write_text(json.dumps(edited))
    changed, report = contract(
        tmp_path, target("atomic"), "--only", "catalog", "--snapshot", str(snapshot), "--token-budget", "100"
    )
    assert changed.returncode == 1
    evidence = report["checks"][0]["evidence"]
    problems = evidence["problems"]
    assert f"the catalog costs {evidence['tokens']['total']} tokens, over the budget of 100" in problems
    assert f"since the snapshot {snapshot}: {edited[0]['name']} changed" in problems


@pytest.mark.parametrize(
    ("env", "verdict", "why"),
    [
        (
            {"INVOICES_REQUEST_STATE": "shared"},
            "pass",
            "declined, it ended after 2 question(s) with tool_error customer_ambiguous: ",
        ),
        (
            {"INVOICES_REQUEST_STATE": "process"},
            "fail",
            "the answer sent after a restart got protocol_error: HTTP 400: JSON-RPC error -32602: "
            "Invalid or expired requestState: the requestState did not outlive the process",
        ),
        (
            {"INVOICES_REQUEST_STATE": "shared", "INVOICES_FLAW": "endless_questions"},
            "fail",
            "still asking after 5 declined questions (the check gave up): an endless loop",
        ),
    ],
    ids=["shared_key", "per_process_key", "endless_questions"],
)
def test_mrtr(tmp_path: Path, env: dict[str, str], verdict: str, why: str) -> None:
    proc, report = contract(tmp_path, asking(**env), "--only", "mrtr")
    assert verdicts(report) == {"mrtr": verdict}, proc.stdout
    (check,) = report["checks"]
    assert check["why"].startswith(why)
    assert proc.returncode == (0 if verdict == "pass" else 1)
    if verdict == "pass":
        assert check["evidence"]["effects"] == 1
        assert check["evidence"]["answered after a restart"]["outcome"] == "ok"


def test_mrtr_is_not_applicable_without_a_question_or_an_answer(tmp_path: Path) -> None:
    _, report = contract(tmp_path, target("atomic"), "--only", "mrtr")
    assert verdicts(report) == {"mrtr": "not_applicable"}
    assert report["checks"][0]["why"].startswith("create_invoice answered ok without asking: nothing to test")
    unanswered = asking(INVOICES_REQUEST_STATE="shared")
    del unanswered["workload"]["answers"]
    _, report = contract(tmp_path, unanswered, "--only", "mrtr")
    assert verdicts(report) == {"mrtr": "not_applicable"}
    assert report["checks"][0]["why"] == (
        "create_invoice asks, but the scenario cannot answer: "
        "no answer to the server's question 'customer' in workload.answers"
    )


def test_handles_why_each_verdict(tmp_path: Path) -> None:
    """The evidence a person reads: where the handles were found, what the expired one answered, and
    why a target without handles is not applicable."""
    proc, report = contract(tmp_path, demo(), "--only", "handles")
    assert proc.returncode == 0, proc.stdout
    (check,) = report["checks"]
    assert check["evidence"]["found"] == (
        "search_invoices's outputSchema has next_page; search_next takes it as next_page"
    )
    assert check["evidence"]["handle"].startswith("h1_")
    assert "handle_invalid" in json.dumps(check["evidence"])
    assert check["why"].startswith("search_invoices returns opaque, versioned handles (h1_...)")
    assert "handle_expired, recovery: Run search_invoices again" in check["why"]
    _, report = contract(tmp_path, demo(INVOICES_FLAW="raw_cursor"), "--only", "handles")
    assert report["checks"][0]["why"] == (
        "'limit=1&after=1' has no version prefix (like h1_): its encoding cannot change without breaking "
        "the handles agents hold; not opaque: 'limit=1&after=1' is readable text an agent can edit"
    )
    _, report = contract(tmp_path, demo(INVOICES_FLAW="expired_500"), "--only", "handles")
    assert report["checks"][0]["why"] == (
        "an expired handle got JSON-RPC error -32603: Internal error: a model reads 'this tool is broken', "
        "not what to do"
    )
    _, report = contract(tmp_path, target("atomic"), "--only", "handles")
    assert report["checks"][0]["verdict"] == "not_applicable"
    assert report["checks"][0]["why"].startswith("no tool returns a handle")
    slow = demo(INVOICES_HANDLE_TTL_MS="900000")
    _, report = contract(tmp_path, slow, "--only", "handles", "--handle-wait", "0.5")
    assert report["checks"][0]["verdict"] == "not_applicable"
    assert "so expiry is untested" in report["checks"][0]["why"]


BLOATED, TERSE = 2.4, 0.38
"""The article's section 06: bloated costs 2.4x the engineered catalog, terse 38% less."""


def test_catalog_cost_reproduces_the_article_ratios(tmp_path: Path) -> None:
    """Within 0.05 of 2.4x and one point of 38%: the texts are the article's where it gives them, and
    written in each style where it does not; a change to any of them shows here."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(invoice_scenario(env={"INVOICES_CATALOG": "demo"})))
    run = ["contract", str(path), "--results", str(tmp_path / "r")]
    proc = mcp_chaos(*run, "--catalog-cost")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    cost = json.loads((run_dir / "catalog-cost.json").read_text())
    assert abs(cost["bloated_vs_engineered"] - BLOATED) <= 0.05, cost
    assert abs(cost["terse_saving_vs_engineered"] - TERSE) <= 0.01, cost
    totals = {style: c["total"] for style, c in cost["styles"].items()}
    assert totals["bloated"] > totals["engineered"] > totals["terse"]
    assert set(cost["styles"]["terse"]["tools"]) == {
        "create_invoice",
        "get_invoice",
        "search_invoices",
        "search_next",
        "send_invoice",
        "void_invoice",
    }
    assert f"| **total**       | **{totals['bloated']}** |" in proc.stdout
    assert "bloated / engineered: 2.4" in (run_dir / "catalog-cost.md").read_text()
    usage = mcp_chaos(*run, "--catalog-cost", "--only", "catalog")
    assert usage.returncode == 2
    assert "--catalog-cost measures the catalog and runs no check" in usage.stderr
    flat = mcp_chaos(*run, "--catalog-cost", "--style-env", "NOT_READ")
    assert "the three styles cost the same: does the target read NOT_READ?" in flat.stdout


def test_the_bloated_catalog_breaks_the_one_sentence_advice(tmp_path: Path) -> None:
    _, report = contract(tmp_path, demo(INVOICES_DESCRIPTIONS="bloated"), "--only", "catalog")
    problems = report["checks"][0]["evidence"]["problems"]
    assert len(problems) == 6
    assert all("sentences; one of purpose and one of rules say it" in p for p in problems)
    _, report = contract(tmp_path, demo(INVOICES_DESCRIPTIONS="terse"), "--only", "catalog")
    assert report["checks"][0]["evidence"]["problems"] == [
        f"{tool}: nothing says to reuse idempotency_key only for retries of the same intent"
        for tool in ("create_invoice", "send_invoice", "void_invoice")
    ]


# -- servers as they are published: no key, the SDK's errors, failures dressed as success, sessions

NOTES = ROOT / "targets" / "notes" / "server.py"


def notes(tool: str = "write_note", **env: str) -> dict[str, Any]:
    """The notes target over stdio: a keyless upsert (write_note) or a keyless insert (add_note)."""
    arguments = (
        {"name": "note-{index}", "content": "{marker}"}
        if tool == "write_note"
        else {"title": "note {index}", "body": "{marker}"}
    )
    return {
        "name": "notes",
        "seed": 1,
        "target": {
            "command": ["{python}", str(NOTES)],
            "transport": "stdio",
            "env": {"NOTES_FILE": "{data_dir}/notes.jsonl", **env},
            "restart_delay_s": 0.05,
        },
        "workload": {"intents": 10, "tool": tool, "arguments": arguments},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "body"}}},
    }


REPEATS = "replay,twins,key_reuse,concurrent_same_key,restart_keeps_keys,catalog"


def test_without_a_key_a_naturally_idempotent_write_passes_and_twins_do_not_apply(tmp_path: Path) -> None:
    proc, report = contract(tmp_path, notes("write_note"), "--only", REPEATS)
    assert verdicts(report) == {
        "replay": "pass",
        "twins": "not_applicable",
        "key_reuse": "not_applicable",
        "concurrent_same_key": "pass",
        "restart_keeps_keys": "pass",
        "catalog": "fail",
    }, proc.stdout
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["replay"]["title"] == "the same call twice (no key travels): one effect, the same result"
    assert by_id["replay"]["why"] == "one effect and the same answer: the call is naturally idempotent"
    assert by_id["replay"]["evidence"]["key"].startswith("none travels")
    assert by_id["twins"]["why"].startswith("no key travels with a call (no {key} in workload.arguments")
    assert by_id["key_reuse"]["why"].endswith("there is no key to reuse for another payload")
    assert by_id["catalog"]["why"].startswith("write_note changes state but takes no idempotency key")


def test_without_a_key_an_insert_fails_replay_because_a_retry_is_a_new_call(tmp_path: Path) -> None:
    proc, report = contract(
        tmp_path, notes("add_note"), "--only", "replay,concurrent_same_key,restart_keeps_keys"
    )
    assert verdicts(report) == {
        "replay": "fail",
        "concurrent_same_key": "pass",
        "restart_keeps_keys": "fail",
    }, proc.stdout
    by_id = {c["id"]: c for c in report["checks"]}
    no_key = "a retry cannot be told from a new call: give the tool an idempotency key"
    assert by_id["replay"]["why"] == f"2 effects from the same call made twice: {no_key}"
    assert by_id["restart_keeps_keys"]["why"].endswith(no_key)
    assert "forgotten" not in json.dumps(report)  # no key, so none was forgotten
    assert by_id["concurrent_same_key"]["why"].startswith(
        "8 concurrent identical calls acknowledged, 8 stored: none lost"
    )


def test_a_keyless_server_racing_a_shared_counter_fails_concurrent_same_key_as_lost_writes(
    tmp_path: Path,
) -> None:
    # 100 ms between reading the counter and moving it on: all eight calls read the same id.
    racing = notes("add_note", NOTES_FLAW="racy_ids", NOTES_WORK_MS="100")
    proc, report = contract(tmp_path, racing, "--only", "concurrent_same_key")
    assert verdicts(report) == {"concurrent_same_key": "fail"}, proc.stdout
    (check,) = report["checks"]
    assert check["why"].startswith(
        "lost writes: 8 concurrent identical calls acknowledged all with the same record (id="
    )
    assert "1 stored: 7 acknowledged write(s) lost" in check["why"]
    assert check["evidence"]["the same call twice in a row"]["effects"] == 2


@pytest.mark.parametrize(
    ("env", "verdict", "why"),
    [
        (
            {},
            "pass",
            "1 error(s) in the server's own words keep it (its own call (title sent empty): tool_error ",
        ),
        (
            {"NOTES_ERRORS": "tool_error"},
            "pass",
            "its errors carry their JSON after the SDK's 'Error executing tool ...:' prefix",
        ),
        (
            {"NOTES_FLAW": "error_as_success", "NOTES_FAIL_EVERY": "1"},
            "fail",
            "failure reported as success: in replay, add_note answered OK (isError false) with "
            "'Database error: no such table: notes (",
        ),
    ],
    ids=["structured", "sdk_tool_error", "error_as_success"],
)
def test_error_contract_reads_errors_as_models_do(
    tmp_path: Path, env: dict[str, str], verdict: str, why: str
) -> None:
    proc, report = contract(tmp_path, notes("add_note", **env), "--only", "replay,error_contract")
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["error_contract"]["verdict"] == verdict, proc.stdout
    assert why in by_id["error_contract"]["why"]
    provoked = by_id["error_contract"]["evidence"]["provoked"]
    assert set(provoked) == {
        "without its required title",
        "title of the wrong type (string expected)",
        "title sent empty",
    }
    if verdict == "fail":
        assert by_id["replay"]["why"].startswith("a failure reported as success: it answered OK with")


def test_error_contract_judges_nothing_it_did_not_see_in_the_servers_own_words(tmp_path: Path) -> None:
    """A tool that takes any text, the empty one too: only its SDK's schema refusals were seen, and its
    ordinary calls answered plainly. That is no pass (it once passed on the schema's refusals alone):
    the server's error contract is unknown, and the result says so."""
    server = tmp_path / "in_memory.py"
    server.write_text(IN_MEMORY)
    data = {
        "name": "in-memory",
        "target": {"command": ["{python}", str(server)]},
        "workload": {"intents": 10, "tool": "add_item", "arguments": {"text": "{marker}"}},
        "audit": {"effects": {"tool": {"tool": "count_items", "arguments": {"prefix": "{namespace}"}}}},
    }
    proc, report = contract(tmp_path, data, "--only", "error_contract")
    # replay fails (a keyless insert made twice); error_contract judges its ok answers all the same.
    assert verdicts(report) == {"replay": "fail", "error_contract": "not_applicable"}, proc.stdout
    check = report["checks"][1]
    assert check["why"].startswith(
        "no error in the server's own words to judge: the checks provoked none (2 call(s) its schema "
        "refuses were clearly refused, by its SDK; 2 ordinary ok answer(s) read as done), so its error "
        "contract is unknown"
    ), check["why"]


def test_error_contract_fails_a_server_whose_every_ordinary_call_answers_ok_with_an_error(
    tmp_path: Path,
) -> None:
    """Every add_row answers ok "Database error: no such table: rows", and its one argument has a
    minLength, so error_contract provokes no call of its own the server answers: it once made no
    ordinary call, saw no error in the server's words, and passed on the schema's refusals alone.
    Alone, it now brings replay's ordinary calls, and fails on their reply, named."""
    server = tmp_path / "no_table.py"
    server.write_text(NO_TABLE)
    data = {
        "name": "no-table",
        "target": {"command": ["{python}", str(server)]},
        "workload": {"intents": 10, "tool": "add_row", "arguments": {"memo": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/rows.jsonl", "marker_field": "memo"}}},
    }
    proc, report = contract(tmp_path, data, "--only", "error_contract")
    assert proc.returncode == 1, proc.stdout
    by_id = {c["id"]: c for c in report["checks"]}
    check = by_id["error_contract"]
    assert check["verdict"] == "fail", proc.stdout
    assert check["why"].startswith(
        "failure reported as success: in replay, add_row answered OK (isError false) with 'Database "
        "error: no such table: rows' and stored nothing"
    ), check["why"]
    assert set(check["evidence"]["provoked"]) == {
        "without its required memo",
        "memo of the wrong type (string expected)",
    }


def test_error_contract_judges_its_own_provoked_calls(tmp_path: Path) -> None:
    """Its own call with customer_id sent empty is answered OK with the database's error and stores
    nothing, and that is the finding, naming the reply (replay's ordinary calls answered well)."""
    data = target("atomic", INVOICES_FLAW="swallowed_errors")
    proc, report = contract(tmp_path, data, "--only", "error_contract")
    check = {c["id"]: c for c in report["checks"]}["error_contract"]
    assert check["verdict"] == "fail", proc.stdout
    assert check["why"].startswith(
        "failure reported as success: in its own call (customer_id sent empty), create_invoice answered "
        "OK (isError false) with 'Error adding record: relation \"customers\" does not exist' and stored"
    )
    assert check["evidence"]["effects of the provoked calls"] == 0


def test_a_2025_session_server_with_keys_in_memory_completes_every_check(tmp_path: Path) -> None:
    """Its sessions and its keys die with the process: the contract opens a new session after the restart
    (as a run does), so restart_keeps_keys judges the two effects, and idempotentHint is caught."""
    data = target(
        "atomic", INVOICES_SESSIONS="stateful", INVOICES_FLAW="memory_keys", INVOICES_ANNOTATIONS="idempotent"
    )
    data["client"]["protocol"] = "2025-11-25"
    proc, report = contract(tmp_path, data)
    assert set(verdicts(report)) == ALL, proc.stderr
    assert "error" not in verdicts(report).values(), proc.stdout
    by_id = {c["id"]: c for c in report["checks"]}
    restart = by_id["restart_keeps_keys"]
    assert restart["verdict"] == "fail"
    assert restart["why"].startswith("2 effects: the key was forgotten with the process")
    assert "the 2025 session was lost with the process too" in restart["why"]
    assert restart["evidence"]["effects"] == 2
    assert restart["evidence"]["after restart"]["outcome"] == "ok"  # not the 404
    assert by_id["annotations"]["verdict"] == "fail"
    assert (
        "says idempotentHint: true, and one call made again made a second effect"
        in by_id["annotations"]["why"]
    )
    assert "restart_keeps_keys: 2 effects" in by_id["annotations"]["why"]
    assert by_id["catalog"]["verdict"] == "pass"  # listed again after the restart, in a new session
    (run_dir,) = (tmp_path / "r").iterdir()
    assert "## catalog: pass" in (run_dir / "contract.md").read_text()


def test_a_check_that_cannot_finish_is_an_error_and_the_others_still_run(tmp_path: Path) -> None:
    # The crash variant's environment makes a target that will not start: crash_window cannot finish.
    junit_path = tmp_path / "junit.xml"
    proc, report = contract(
        tmp_path,
        target("atomic"),
        "--only",
        "replay,crash_window,catalog",
        "--crash-env",
        "INVOICES_MODE=nope",
        "--junit",
        str(junit_path),
    )
    assert verdicts(report) == {"replay": "pass", "crash_window": "error", "catalog": "pass"}, proc.stdout
    assert proc.returncode == 1
    assert report["passed"] is False
    crash = report["checks"][1]
    assert crash["why"].startswith("the check could not finish: ")
    assert crash["why"].endswith("fix what stopped it, then run this check again (--only crash_window)")
    assert "1 could not finish" in proc.stdout
    (run_dir,) = (tmp_path / "r").iterdir()
    assert "## crash_window: ERROR" in (run_dir / "contract.md").read_text()
    import xmlschema

    xmlschema.XMLSchema(str(Path(__file__).parents[1] / "schemas" / "junit.xsd")).validate(str(junit_path))
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")
    error = suite.find("testcase[@name='crash_window']/error")
    assert error is not None
    assert (error.get("message") or "").startswith("the check could not finish: ")


def test_a_check_whose_effect_source_fails_is_an_error_never_a_pass(tmp_path: Path) -> None:
    """The atomic design passes replay and key_reuse. With an effect source that cannot be read (a
    command that fails: a locked database), no count holds: both end ERROR, naming the source, where
    they once passed (key_reuse: the other payload "took no effect") or failed on "0 effects"."""
    failing = tmp_path / "count.sh"
    failing.write_text("#!/bin/sh\necho 'database is locked' >&2\nexit 1\n")
    failing.chmod(0o755)
    data = target("atomic")
    data["audit"]["effects"] = {"command": {"command": [str(failing)], "timeout_s": 10}}
    proc, report = contract(tmp_path, data, "--only", "replay,key_reuse")
    assert verdicts(report) == {"replay": "error", "key_reuse": "error"}, proc.stdout
    for check in report["checks"]:
        assert "the effect source could not be read" in check["why"], check
        assert "database is locked" in check["why"], check
    assert proc.returncode != 0


def ledger(tmp_path: Path, filler: int = 3) -> dict[str, Any]:
    server = tmp_path / "ledger.py"
    server.write_text(LEDGER)
    return {
        "name": "ledger",
        "target": {
            "command": ["{python}", str(server)],
            "env": {"LEDGER_FILE": "{data_dir}/ledger.jsonl", "LEDGER_FILLER": str(filler)},
        },
        "workload": {
            "intents": 20,
            "tool": "record_entry",
            "arguments": {"region": "eu-{index}", "memo": "{marker}", "idempotency_key": "{key}"},
        },
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "memo"}}},
    }


def test_a_tool_that_marks_a_header_on_a_later_page_is_checked_as_a_run_calls_it(tmp_path: Path) -> None:
    """The checks call the tool as a run does, with its Mcp-Param-Region header (the SDK's server
    refuses a call without it: every check once failed on the harness's own protocol error), and read
    every page of tools/list (annotations once said the tool was not listed, and catalog counted the
    first page only)."""
    proc, report = contract(
        tmp_path, ledger(tmp_path), "--only", "replay,restart_keeps_keys,annotations,catalog"
    )
    assert "header is missing" not in proc.stdout, proc.stdout
    got = verdicts(report)
    assert got == {
        "replay": "pass",
        "restart_keeps_keys": "pass",
        "annotations": "pass",
        "catalog": "pass",
    }, proc.stdout
    catalog = next(c for c in report["checks"] if c["id"] == "catalog")
    assert catalog["evidence"]["tools"] == 4


def test_a_listing_past_its_pages_is_said_not_cut_silently(tmp_path: Path) -> None:
    proc, report = contract(tmp_path, ledger(tmp_path, filler=41), "--only", "catalog")
    (catalog,) = report["checks"]
    assert catalog["verdict"] == "fail", proc.stdout
    problems = catalog["evidence"]["problems"]
    assert any(p.startswith("tools/list goes on past 20 pages (40 tools read") for p in problems), problems
