"""What ``races`` writes of its table besides the terminal's (no process): the JUnit document, a case
per ordering and a failure per finding, valid against the schema CI readers take; the JSON in
``crashpoints``' shape where it can be; each finding's line to try it alone."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import xmlschema

from harness.contract.checks.concurrent import unraceable
from harness.crashpoints.racing import (
    FIX_ANSWERED_EARLY,
    Answer,
    RaceRow,
    Races,
    as_json,
    junit_text,
    render_terminal,
)
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario

XSD = Path(__file__).parents[1] / "schemas" / "junit.xsd"
AGAIN = "mcp-chaos races my.yaml"


def row(intent: int, id: str, made: str, verdict: str, effects: int, why: str = "") -> RaceRow:
    held, _, point = id.partition(":")
    return RaceRow(
        ordering=f"the ordering {id}",
        intent=intent,
        id=id,
        held=held,
        point=point,
        label="INSERT invoices" if point.startswith("db_") else None,
        made=made,
        why=why,
        verdict=verdict,
        effects=effects,
        ran=["o:request", "r:request"],
        fix="take a unique key" if verdict == "duplicate" else None,
    )


def races(tmp_path: Path) -> Races:
    rows = [
        row(1, "original:request", "made", "exactly_once", 1),
        row(2, "original:db_commit#2", "blocked", "duplicate", 2, "the server serializes here"),
        row(3, "retry:db_commit#2", "not reached", "exactly_once", 1, "the retry never reached db_commit#2"),
    ]
    return Races(
        scenario=parse_scenario(invoice_scenario()),
        run_dir=tmp_path,
        clean=["request", "db_commit#2 (INSERT invoices)", "response"],
        rows=rows,
        orderings=[r.ordering for r in rows] + ["the ordering retry:response"],
        ran_out=True,
        seconds=12.5,
    )


def test_the_junit_document_has_a_case_per_ordering_and_fails_the_findings(tmp_path: Path) -> None:
    path = tmp_path / "races.xml"
    path.write_text(junit_text(races(tmp_path), AGAIN), encoding="utf-8")
    xmlschema.XMLSchema(str(XSD)).validate(str(path))
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "2")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["original:db_commit#2 the ordering original:db_commit#2"].find("failure")
    assert failure is not None
    assert failure.get("message") == "duplicate (2 effects)"
    assert "reproduce with: mcp-chaos races my.yaml --only original:db_commit#2" in (failure.text or "")
    skipped = cases["the ordering retry:response"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "the budget ran out"


def test_the_json_carries_each_finding_as_crashpoints_json_does(tmp_path: Path) -> None:
    found = as_json(races(tmp_path), AGAIN)
    finding = [o for o in found["orderings"] if o["finding"]]
    assert [o["id"] for o in finding] == ["original:db_commit#2"]
    (one,) = finding
    assert one["reproducer"] == "race-original-db_commit-2.yaml"
    assert one["reproduce"] == "mcp-chaos races my.yaml --only original:db_commit#2"
    assert (one["point"], one["label"], one["verdicts"], one["fix"]) == (
        "db_commit#2",
        "INSERT invoices",
        {"duplicate": 1},
        "take a unique key",
    )
    assert found["clean_call"] == ["request", "db_commit#2", "response"]
    assert found["clean_call_labels"] == [None, "INSERT invoices", None]
    assert found["untried"] == ["the ordering retry:response"]
    assert found["conclusion"] == "1 of 3 orderings tried have a finding"
    assert [o["finding"] for o in found["orderings"]].count(None) == 2


def test_each_finding_says_the_line_that_tries_it_alone(tmp_path: Path) -> None:
    text = render_terminal(races(tmp_path), AGAIN)
    assert text.count("reproduce with:") == 1
    assert "  reproduce with: mcp-chaos races my.yaml --only original:db_commit#2\n" in text
    assert "reproduce with" not in render_terminal(races(tmp_path))


def test_concurrent_same_key_races_only_where_a_race_can_hold_the_targets_work() -> None:
    on_sqlite = parse_scenario(invoice_scenario(mode="keyed"))
    assert unraceable(on_sqlite) is not None
    assert unraceable(on_sqlite).startswith("no point a race holds")  # type: ignore[union-attr]
    data = invoice_scenario(mode="keyed")
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    assert unraceable(parse_scenario(data)) is None
    data["target"]["replicas"] = 2
    assert "replicated" in (unraceable(parse_scenario(data)) or "")
    data["target"]["replicas"] = 1
    data["target"]["transport"] = "stdio"
    assert "not stdio" in (unraceable(parse_scenario(data)) or "")


def test_an_answer_given_before_its_effect_is_shown_beside_the_store_then_and_at_the_end(
    tmp_path: Path,
) -> None:
    """An observation, not a finding: the answer, the store as it came (0), at the end (1), side by side in
    the terminal, the JSON and the JUnit case, with the fix; an answer the store already held is not."""
    found = races(tmp_path)
    early = row(4, "original:db_commit#3", "blocked", "exactly_once", 1)
    early.answers = [Answer("retry", '{"invoice_id":"inv_00000012"}', 0)]
    early.fix = FIX_ANSWERED_EARLY
    later = row(5, "original:response", "made", "exactly_once", 1)
    later.answers = [Answer("retry", '{"invoice_id":"inv_00000013"}', 1)]
    found.rows += [early, later]
    text = render_terminal(found, AGAIN)
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("|")]
    assert cells[0][-1] == "stored at the answer"
    assert ["4", "the ordering original:db_commit#3", "blocked", "exactly_once", "1", "retry: 0"] in cells
    assert "the ordering original:db_commit#3: answered before the effect (exactly_once at the end)" in text
    assert 'the retry was answered: {"invoice_id":"inv_00000012"}' in text
    assert "the store then: 0 effects; at the end: 1 (exactly_once)" in text
    assert "inv_00000013" not in text
    orderings = {o["id"]: o for o in as_json(found, AGAIN)["orderings"]}
    one = orderings["original:db_commit#3"]
    assert (one["observation"], one["finding"], one["stored_at_end"]) == (
        "answered before the effect",
        None,
        1,
    )
    assert one["answers"] == [
        {"attempt": "retry", "reply": '{"invoice_id":"inv_00000012"}', "stored_then": 0}
    ]
    assert one["fix"].endswith("commit the key record and the effect in one transaction")
    assert orderings["original:response"]["observation"] is None
    path = tmp_path / "races.xml"
    path.write_text(junit_text(found, AGAIN), encoding="utf-8")
    xmlschema.XMLSchema(str(XSD)).validate(str(path))
    assert "the store then: 0 effects; at the end: 1" in path.read_text(encoding="utf-8")
