"""``mcp-chaos races`` on the reference target and real PostgreSQL: the keyed read-then-write design
duplicates where the retry reads before the original's key record commits, in every repetition and in
the same table each time; the atomic design has no finding, every ordering made or said blocked.

The reference target calls its database driver synchronously on its event loop, so holding one of its
statements stalls every request: most orderings are blocked (the server serializes there) and the
server's own scheduling places the retry, at its ``await`` between steps (the latencies below give it
those steps). That is what the table says, and what a user's server of that shape does."""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest
import xmlschema
import yaml

from harness.cli import main
from harness.contract.checks.concurrent import RACED_TITLE
from tests.helpers.cli import mcp_chaos
from tests.helpers.scenarios import invoices_on_postgres, pgclients_scenario

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

BOTH_READ = "retry sent at db_statement#1 (SELECT idempotency_keys) of the original"
"""The retry sent while the original is about to read the key: both read it missing."""
BETWEEN_COMMITS = "retry sent at db_commit#2 (INSERT invoices) of the original"
"""The narrow one: the invoice committed, the key record not yet."""
AFTER_KEY = "retry sent at db_commit#3 (INSERT idempotency_keys) of the original"
BOTH_READ_POOLED = "original:db_statement#1"
"""The pooled target's retry sent while its original is about to read the key: both read it missing."""


def races(mode: str, tmp_path: Path, name: str) -> tuple[int, dict[str, Any], float]:
    """``mcp-chaos races`` of the reference target on PostgreSQL: its exit code, its JSON, its seconds."""
    data = invoices_on_postgres(mode, INVOICES_PRE_COMMIT_MS="30", INVOICES_BETWEEN_COMMITS_MS="30")
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / f"{name}.json"
    started = time.monotonic()
    code = main(["races", str(scenario), "--json", str(out), "--results", str(tmp_path), "--quiet"])
    return code, orjson.loads(out.read_bytes()), time.monotonic() - started


def table(found: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(o["ordering"], o["made"], o["verdict"]) for o in found["orderings"]]


def test_the_keyed_design_duplicates_where_the_retry_reads_before_the_key_commits_every_time(
    tmp_path: Path, postgres_server: None
) -> None:
    tables = []
    for repetition in range(3):
        code, found, seconds = races("keyed", tmp_path, f"keyed{repetition}")
        assert code == 1
        rows = {o["ordering"]: o for o in found["orderings"]}
        assert not found["untried"], found["untried"]
        assert rows[BOTH_READ]["verdict"] == "duplicate"
        assert rows[BETWEEN_COMMITS]["verdict"] == "duplicate"
        assert rows[AFTER_KEY]["verdict"] == "exactly_once"  # the retry finds the key and replays
        assert rows[BETWEEN_COMMITS]["fix"].startswith(
            "reads the key (SELECT idempotency_keys), then inserts (INSERT invoices), with neither"
        )
        # The sequential orders, each way round, are made and safe.
        for sequential in (
            "retry sent at request of the original",
            "retry held at request while the original runs",
        ):
            assert (rows[sequential]["made"], rows[sequential]["verdict"]) == ("made", "exactly_once")
        assert seconds < 240, seconds  # about 60 s alone on 2 cores; generous for a loaded machine
        tables.append(table(found))
    assert tables[0] == tables[1] == tables[2]  # the same table every time


def test_the_atomic_design_has_no_finding_and_every_ordering_is_made_or_said_blocked(
    tmp_path: Path, postgres_server: None
) -> None:
    code, found, _ = races("atomic", tmp_path, "atomic")
    assert code == 0
    assert not found["untried"]
    assert {o["verdict"] for o in found["orderings"]} == {"exactly_once"}
    for row in found["orderings"]:
        assert row["made"] in ("made", "blocked"), row
        if row["made"] == "blocked":
            assert row["why"].endswith("the server serializes here"), row


def pooled_scenario(mode: str, tmp_path: Path, **env: str) -> Path:
    """The pgclients target on asyncpg with a pool of two: each attempt has a connection of its own, so
    holding one attempt's statement leaves the other free to run."""
    data = pgclients_scenario(mode, PGCLIENTS_POOL="2", **env)
    scenario = tmp_path / f"pooled-{mode}{''.join(env.values())}.yaml"
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    return scenario


def pooled(mode: str, tmp_path: Path) -> dict[str, Any]:
    """``races`` of the pgclients target on asyncpg with a pool of two (:func:`pooled_scenario`)."""
    data = yaml.safe_load(pooled_scenario(mode, tmp_path).read_text(encoding="utf-8"))
    scenario = tmp_path / f"pooled-{mode}.yaml"
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / f"pooled-{mode}.json"
    main(["races", str(scenario), "--json", str(out), "--results", str(tmp_path), "--quiet"])
    found: dict[str, Any] = orjson.loads(out.read_bytes())
    return {o["ordering"]: o for o in found["orderings"]}


def test_a_pooled_server_runs_each_ordering_and_a_lock_is_said_to_block(
    tmp_path: Path, postgres_server: None
) -> None:
    """Keyed: every ordering made; the retry held at its invoice commit while the original runs whole is
    a duplicate, and held once its key record committed it is not. Atomic: no finding; the retry's key
    record waits on the original's uncommitted one (its unique key), which the table says."""
    keyed = pooled("keyed", tmp_path)
    assert {o["made"] for o in keyed.values()} == {"made"}
    assert (
        keyed["retry held at db_commit#3 (INSERT invoices) while the original runs"]["verdict"] == "duplicate"
    )
    after = keyed["retry held at db_commit#5 (INSERT idempotency_keys) while the original runs"]
    assert after["verdict"] == "exactly_once"
    atomic = pooled("atomic", tmp_path)
    assert {o["verdict"] for o in atomic.values()} == {"exactly_once"}
    blocked = [o for o in atomic.values() if o["made"] == "blocked"]
    assert blocked, atomic
    for row in blocked:
        assert "then waited for the" in row["why"], row


def test_a_flaw_whose_only_window_is_a_race_is_found_by_races_and_not_by_crash_points(
    tmp_path: Path, postgres_server: None
) -> None:
    """The atomic design with its key records in a table without a unique key: the invoice and its key
    commit together, so a crash anywhere leaves either both or neither (crash points: no finding), but
    two attempts that both read no key both commit (races: a duplicate)."""
    scenario = pooled_scenario("atomic", tmp_path, PGCLIENTS_KEYS="plain")
    out = tmp_path / "plain.json"
    code = main(["races", str(scenario), "--json", str(out), "--results", str(tmp_path), "--quiet"])
    found = orjson.loads(out.read_bytes())
    duplicates = [o["ordering"] for o in found["orderings"] if o["verdict"] == "duplicate"]
    assert code == 1
    assert duplicates, table(found)
    crash = tmp_path / "crash.json"
    argv = ["crashpoints", str(scenario), "--repeat", "1", "--allow-inconclusive", "--json", str(crash)]
    code = main([*argv, "--results", str(tmp_path), "--quiet"])
    explored = orjson.loads(crash.read_bytes())
    assert code == 0, explored["conclusion"]
    assert [p["point"] for p in explored["points"] if p["finding"]] == []
    assert explored["points"], "no point explored"


def test_a_findings_emitted_test_fails_every_time_on_the_race_and_passes_once_the_design_is_atomic(
    tmp_path: Path, postgres_server: None
) -> None:
    """``races --only ID --emit DIR`` on the pooled keyed target: the ordering where both attempts read
    the key before either writes it is a duplicate; its reproduce line names it (so do its JUnit failure
    and its JSON), and the pytest file written for it replays that ordering (three tries after a clean
    call) and fails 3 of 3; with the target made atomic the same file passes."""
    scenario = pooled_scenario("keyed", tmp_path)
    emitted = tmp_path / "emitted"
    started = time.monotonic()
    said = subprocess.run(
        [
            *(sys.executable, "-m", "harness.cli", "races", str(scenario), "--only", BOTH_READ_POOLED),
            *("--emit", str(emitted), "--results", str(tmp_path / "r"), "--quiet"),
            *("--junit", str(tmp_path / "races.xml"), "--json", str(tmp_path / "races.json")),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert said.returncode == 1, said.stdout + said.stderr
    assert f"reproduce with: mcp-chaos races {scenario} --only {BOTH_READ_POOLED}\n" in said.stdout
    xmlschema.XMLSchema(str(Path(__file__).parents[1] / "schemas" / "junit.xsd")).validate(
        str(tmp_path / "races.xml")
    )
    suite = ET.parse(tmp_path / "races.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("1", "1")
    (row,) = orjson.loads((tmp_path / "races.json").read_bytes())["orderings"]
    assert (row["id"], row["finding"], row["reproducer"]) == (
        BOTH_READ_POOLED,
        "duplicate",
        "race-original-db_statement-1.yaml",
    )
    reproducer = emitted / "race-original-db_statement-1.yaml"
    test = emitted / "test_race_original_db_statement_1.py"
    assert sorted(emitted.iterdir()) == [reproducer, test]
    race = yaml.safe_load(reproducer.read_text(encoding="utf-8"))["faults"]["crash_points"]["race"]
    assert (race["only"], race["repeat"]) == ([BOTH_READ_POOLED], 3)

    def pytest_on(test: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)]
        return subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)

    for _ in range(3):
        still = pytest_on(test)
        assert still.returncode == 1, still.stdout + still.stderr
        assert "'duplicate': 3" in still.stdout, still.stdout
    fixed = yaml.safe_load(reproducer.read_text(encoding="utf-8"))
    fixed["target"]["env"]["PGCLIENTS_MODE"] = "atomic"
    reproducer.write_text(yaml.safe_dump(fixed), encoding="utf-8")
    passed = pytest_on(test)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert time.monotonic() - started < 240  # about 60 s alone on 2 cores


def test_contract_checks_concurrent_same_key_by_races_where_it_can_hold_the_targets_work(
    tmp_path: Path, postgres_server: None
) -> None:
    """The pooled target on the harness's PostgreSQL: ``concurrent_same_key`` runs the races, fails the
    keyed design at an ordering (its reproduce line), passes the atomic one, and says it raced."""
    found = {}
    for mode in ("keyed", "atomic"):
        scenario = pooled_scenario(mode, tmp_path)
        out = tmp_path / f"contract-{mode}.json"
        argv: list[str | Path] = ["contract", scenario, "--only", "concurrent_same_key", "--json", out]
        mcp_chaos(*argv, "--results", tmp_path / f"r-{mode}")
        (found[mode],) = orjson.loads(out.read_bytes())["checks"]
    keyed, atomic = found["keyed"], found["atomic"]
    assert (keyed["verdict"], keyed["title"], keyed["evidence"]["method"]) == ("fail", RACED_TITLE, "races")
    assert keyed["why"].startswith("races: retry sent at "), keyed["why"]
    assert "gave duplicate (2 effects)" in keyed["why"]
    assert "reproduce with: mcp-chaos races SCENARIO --only original:" in keyed["why"]
    passed = (atomic["verdict"], atomic["title"], atomic["evidence"]["method"])
    assert passed == ("pass", RACED_TITLE, "races")
    assert atomic["why"].startswith("races: each of 26 orderings"), atomic["why"]


KEY_COMMITTED = "original:db_commit#3"
"""The key-first target's original held at its key record's commit: the retry is sent there, and runs in
the original's work between that commit and the invoice's."""


def test_an_answer_given_before_its_effect_is_shown_beside_the_store_then_and_at_the_end(
    tmp_path: Path, postgres_server: None
) -> None:
    """The reference target with the key record first (``INVOICES_FLAW=key_first``: the key record, holding
    the result to be, commits before the invoice, and a retry that finds it replays at once). The retry
    sent at the original's key record commit is answered an invoice that is not in the store yet: its
    answer, the store then (0) and at the end (1, exactly once) side by side, the observation and its
    fix. The reference target serializes its work (a synchronous driver on its event loop): while the
    original is held at its key record's commit, the retry waits at the server (blocked), and it is
    served once the original awaits its work between its two commits. That work is 500 ms, so the
    retry is served in it whatever the machine's load: with 1 ms, a loaded CI machine let the original
    go on first and commit the invoice before the retry was read, in about one run in three there.
    The read at the answer is right whatever the original does next, because the original waits at
    its next point until the read is done. Twice, the same table."""
    data = invoices_on_postgres(
        "keyed", INVOICES_FLAW="key_first", INVOICES_PRE_COMMIT_MS="30", INVOICES_BETWEEN_COMMITS_MS="500"
    )
    scenario = tmp_path / "keyfirst.yaml"
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    tables = []
    for repetition in range(2):
        out = tmp_path / f"keyfirst{repetition}.json"
        # A hold limit a loaded machine cannot outrun: with the default 2 s, CI once released the original
        # before the retry was answered, and the retry's answer came after the invoice. The hold ends as
        # the retry is answered, so a longer limit costs nothing here.
        argv = [
            "races",
            str(scenario),
            "--only",
            KEY_COMMITTED,
            "--json",
            str(out),
            "--quiet",
            "--hold-limit",
            "20",
        ]
        assert main([*argv, "--results", str(tmp_path / f"r{repetition}")]) == 0  # an observation, no finding
        found = orjson.loads(out.read_bytes())
        (row,) = found["orderings"]
        assert row["id"] == KEY_COMMITTED
        assert row["label"] == "INSERT idempotency_keys"
        assert row["made"] in ("made", "blocked"), row
        (answer,) = row["answers"]
        assert answer["attempt"] == "retry"
        invoice = orjson.loads(answer["reply"])
        assert invoice["invoice_id"].startswith("inv_"), answer
        assert (answer["stored_then"], row["stored_at_end"], row["verdict"]) == (0, 1, "exactly_once")
        assert row["observation"] == "answered before the effect"
        assert row["fix"].endswith("commit the key record and the effect in one transaction")
        assert row["finding"] is None
        # The order the history has: the retry's answer between the original's two commits.
        ran = row["ran"]
        assert ran.index("o:db_commit#3") < ran.index("r:response") < ran.index("o:db_commit#4"), ran
        tables.append((row["made"], answer["stored_then"], row["stored_at_end"], row["verdict"]))
    assert tables[0] == tables[1]


TIMEOUT_ORDERINGS = (
    "original:db_statement#1",
    "original:db_commit#2",
    "original:db_commit#3",
    "retry:request",
)
"""The retry made by the client's timeout while the original is held before it reads the key, between its
two commits, at its key record's commit; and the retry held at the server's door while the original runs."""


def test_a_timeout_retry_duplicates_on_the_keyed_design_where_it_reads_before_the_key_commits(
    tmp_path: Path, postgres_server: None
) -> None:
    """``races --second timeout``: no stream is broken; the client's own attempt timeout (set below the
    hold limit) gives up on the held original and re-issues the call with its key. Keyed: a duplicate where
    the retry reads before the original's key record commits, none once it has; atomic: no finding. The
    table's header says the timeout, and no attempt of the original ended but by it."""
    found = {}
    for mode in ("keyed", "atomic"):
        data = invoices_on_postgres(mode, INVOICES_PRE_COMMIT_MS="30", INVOICES_BETWEEN_COMMITS_MS="30")
        scenario = tmp_path / f"timeout-{mode}.yaml"
        scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
        out = tmp_path / f"timeout-{mode}.json"
        said = subprocess.run(
            [
                *(sys.executable, "-m", "harness.cli", "races", str(scenario), "--second", "timeout"),
                *("--only", ",".join(TIMEOUT_ORDERINGS), "--json", str(out)),
                *("--results", str(tmp_path / mode), "--quiet"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert said.returncode == (1 if mode == "keyed" else 0), said.stdout + said.stderr
        assert said.stdout.startswith("the retry is the client's own: each attempt times out after 1.33 s")
        found[mode] = orjson.loads(out.read_bytes())
        assert found[mode]["second"] == "timeout"
        assert found[mode]["client_timeout_s"] == 1.333
        runs = tmp_path / mode
        (run_dir,) = runs.iterdir()
        history = [orjson.loads(line) for line in (run_dir / "history.jsonl").read_bytes().splitlines()]
        assert not [e for e in history if e["type"] == "stream_fault"]
        held = {o["intent"] for o in found[mode]["orderings"] if o["made"] != "not reached"}
        firsts = {
            e["outcome"]
            for e in history
            if e["type"] == "attempt_ended" and e["intent"] in held and e["attempt"] == 1
        }
        assert firsts == {"timeout"}, firsts  # each held original was given up on by the client's timeout
    keyed = {o["id"]: o for o in found["keyed"]["orderings"]}
    # The reference target serializes its statements: the held original's retry waits at the server's door
    # until the hold limit, and the server's own scheduling places it then (before the key commits, or after).
    assert [keyed[i]["made"] for i in TIMEOUT_ORDERINGS] == ["blocked", "blocked", "blocked", "made"]
    assert keyed["original:db_statement#1"]["verdict"] == "duplicate"
    assert keyed["original:db_commit#2"]["verdict"] == "duplicate"
    assert keyed["original:db_commit#2"]["fix"].startswith("reads the key (SELECT idempotency_keys), then")
    assert keyed["original:db_commit#3"]["verdict"] == "exactly_once"  # the key committed: the retry replays
    assert keyed["retry:request"]["verdict"] == "exactly_once"
    atomic = found["atomic"]["orderings"]
    assert {o["verdict"] for o in atomic} == {"exactly_once"}
    assert [o["made"] for o in atomic] == ["blocked", "blocked", "not reached", "made"]  # two commits, not 3
