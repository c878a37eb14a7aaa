"""Crash points against real targets: the reference servers (Python and TypeScript) on a real PostgreSQL.

No failpoint anywhere: the harness holds the target at its own commits (through its PostgreSQL
proxy), at its downstream call (the effect sink) and at its answer (the fault proxy), SIGKILLs it
there and lets the client retry. What each design must show is the source article's: keyed
read-then-write duplicates at its first commit and nowhere else, atomic at no point, naive at
every point after its commit; a server that records its key first loses an intent; a server
that calls a deduplicating downstream without its key charges twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import yaml

from harness.crashpoints import advice, emit, render
from harness.crashpoints.decisions import Decision, Reached, Site
from harness.crashpoints.explore import Exploration, PointResult, explore, prepare
from harness.crashpoints.options import ExploreOptions
from harness.crashpoints.pgproxy import PostgresProxy
from harness.crashpoints.pgwire import STARTUP_V3
from harness.crashpoints.plans import plan_for
from harness.crashpoints.points import PointKind, parse_path
from harness.crashpoints.render import as_json, render_markdown
from harness.crashpoints.router import Router
from harness.history import HistoryWriter
from harness.loopback import free_port
from harness.scenario import CrashPoints, load_scenario, parse_scenario
from harness.services import CLUSTER_PREFIX, Postgres
from tests.helpers.cli import mcp_chaos
from tests.helpers.containers import labelled_containers
from tests.helpers.paths import ROOT, TS_DIR
from tests.helpers.processes import alive
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"


def on_postgres(mode: str, **env: str) -> dict[str, Any]:
    data = invoice_scenario(mode=mode, env=env)
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": QUERY}}}
    return data


def typescript(mode: str) -> dict[str, Any]:
    data = on_postgres(mode)
    data["target"]["command"] = ["node", str(TS_DIR / "server.mjs")]
    return data


def crashpoints(
    data: dict[str, Any],
    tmp_path: Path,
    *,
    repeat: int = 1,
    only: list[str] | None = None,
) -> Exploration:
    options = ExploreOptions(repeat=repeat, only=tuple(only) if only else None)
    planned = prepare(parse_scenario(data), tmp_path / "results", options)
    return asyncio.run(explore(planned, out=io.StringIO(), progress_interval_s=None))


def table(found: Exploration) -> dict[str, dict[str, int]]:
    return {p.name: {v: n for v, n in p.verdicts.items() if n} for p in found.points}


def singles(found: Exploration) -> dict[str, dict[str, int]]:
    """The table's rows of the call's own points (not a crash in a retry's recovery)."""
    return {name: row for name, row in table(found).items() if "/" not in name}


def everything_proven(found: Exploration) -> bool:
    """Every try of every point held where planned, killed there, its answer withheld: nothing unproven."""
    return all(len(p.proven) == p.tries == p.repeat for p in found.points) and not found.inconclusive


def started_pids(found: Exploration) -> list[int]:
    events = map(orjson.loads, (found.run_dir / "history.jsonl").read_bytes().splitlines())
    return [e["pid"] for e in events if e["type"] in ("pod_started", "service_started")]


@pytest.mark.postgres
def test_the_proxy_holds_a_commit_that_is_already_durable(tmp_path: Path, postgres_server: None) -> None:
    """psycopg through the proxy (its SSL request refused): the commit is in the database, and the
    client still waits for it."""

    async def go() -> None:
        pg = Postgres(tmp_path, "held", free_port())
        # Held by what it commits: the read-only transaction before it is a commit too, and is passed.
        plan = {"holds": [{"at": "db_commit#1", "commits": ["INSERT t"]}]}
        holds = Router(plan_for(CrashPoints.model_validate(plan)))
        killed: list[str] = []

        def kill(*, trigger: str, point: str) -> bool:
            killed.append(point)
            return True

        proxy = PostgresProxy(pg.port, holds)
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            holds.attach(history, kill, lambda: True)
            await pg.start()
            await proxy.start()
            try:
                conn = await psycopg.AsyncConnection.connect(proxy.url("held"), autocommit=True)
                await conn.execute("CREATE TABLE t (memo TEXT)")  # no call in flight: not a point
                holds.opened(0, 1)  # as the fault proxy does when a call reaches the server
                async with conn.transaction():  # a commit that only read: db_commit#1, not the planned one
                    await conn.execute("SELECT count(*) FROM t")

                async def write() -> None:
                    async with conn.transaction():
                        await conn.execute("INSERT INTO t VALUES ('held')")

                writing = asyncio.create_task(write())
                async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as direct:
                    for _ in range(200):
                        cur = await direct.execute("SELECT count(*) FROM t")
                        row = await cur.fetchone()
                        if row is not None and row[0] == 1:
                            break
                        await asyncio.sleep(0.05)
                    else:
                        raise AssertionError("the held commit never became visible in the database")
                assert killed == ["db_commit#2"]
                await asyncio.sleep(0.2)
                assert not writing.done()  # durable, and the client has not been told: it never will be
                writing.cancel()
                with contextlib.suppress(BaseException):
                    await writing
                await conn.close()
            finally:
                await proxy.close()
                await pg.stop()

    asyncio.run(go())


@pytest.mark.postgres
def test_keyed_duplicates_at_its_first_commit_in_every_try_and_nowhere_else(
    tmp_path: Path, postgres_server: None
) -> None:
    found = crashpoints(on_postgres("keyed"), tmp_path, repeat=3)
    assert [(p.name, p.label) for p in found.clean] == [
        ("request", None),
        ("db_commit#1", "SELECT idempotency_keys"),  # the key looked up: a commit that only read
        ("db_commit#2", "INSERT invoices"),
        ("db_commit#3", "INSERT idempotency_keys"),
        ("response", None),
    ]
    assert singles(found) == {
        "request": {"exactly_once": 3},
        "db_commit#1": {"exactly_once": 3},
        "db_commit#2": {"duplicate": 3},
        "db_commit#3": {"exactly_once": 3},
        "response": {"exactly_once": 3},
    }
    assert everything_proven(found)
    # The recovery's paths (a crash in the retry of db_commit#2's crash), tried after the call's own.
    assert [p.name for p in found.points[5:]] == ["db_commit#2/db_commit#2", "db_commit#2/db_commit#3"]
    assert not found.deferred
    assert found.details["db_commit#1"]["wrote"] == "no"
    assert found.details["db_commit#2"]["statements"][0].startswith("INSERT INTO invoices")
    assert found.details["db_commit#3"]["statements"][0].startswith("INSERT INTO idempotency_keys")
    document = as_json(found)
    assert document["conclusion"] == "finding"
    point = document["points"][2]
    assert {k: point[k] for k in ("point", "kind", "index", "label", "tries", "proven", "verdicts")} == {
        "point": "db_commit#2",
        "kind": "db_commit",
        "index": 2,
        "label": "INSERT invoices",
        "tries": 3,
        "proven": 3,
        "verdicts": {"duplicate": 3},
    }
    assert "one transaction" in point["fix"]  # the class's fix (duplicate after a kill)
    assert point["advice"].startswith("db_commit#2 committed the effect ('INSERT INTO invoices")
    assert "(db_commit#3: 'INSERT INTO idempotency_keys" in point["advice"]
    assert point["cause"] == "kill"
    markdown = render_markdown(found)
    story = markdown.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert story[0].startswith(f"intent {point['intent']} ")
    assert story[0].endswith(": duplicate (kill): the client saw ok, 2 effects at the end")
    assert story[3].startswith("    db_commit#1: committed (reads only) 'SELECT")
    assert story[4].startswith("    db_commit#2: committed 'INSERT INTO invoices")
    assert story[4].endswith("RETURNING id': HELD, the pod SIGKILLed here")
    for pid in started_pids(found):  # the pods and PostgreSQL stopped with the run
        assert not alive(pid)


@pytest.mark.postgres
def test_atomic_shows_nothing_at_any_point(tmp_path: Path, postgres_server: None) -> None:
    found = crashpoints(on_postgres("atomic"), tmp_path)
    assert table(found) == {
        "request": {"exactly_once": 1},
        "db_commit#1": {"exactly_once": 1},  # the key looked up
        "db_commit#2": {"exactly_once": 1},  # the invoice and its key record: one commit
        "response": {"exactly_once": 1},
    }
    assert everything_proven(found)
    assert found.findings == []


@pytest.mark.postgres
def test_naive_duplicates_at_its_commit_and_its_answer(tmp_path: Path, postgres_server: None) -> None:
    found = crashpoints(on_postgres("naive"), tmp_path, only=["db_commit#1", "response"])
    assert table(found) == {"db_commit#1": {"duplicate": 1}, "response": {"duplicate": 1}}


@pytest.mark.postgres
def test_recording_the_key_first_loses_an_intent_at_one_point(tmp_path: Path, postgres_server: None) -> None:
    found = crashpoints(on_postgres("keyed", INVOICES_FLAW="key_first"), tmp_path)
    assert singles(found) == {
        "request": {"exactly_once": 1},
        "db_commit#1": {"exactly_once": 1},  # the key looked up
        "db_commit#2": {"exactly_once": 1},  # the invoice's id drawn (nextval: a function, may write)
        "db_commit#3": {"lost": 1},  # the key record, promising an invoice that never came
        "db_commit#4": {"exactly_once": 1},
        "response": {"exactly_once": 1},
    }
    assert found.details["db_commit#2"]["wrote"] == "unknown"
    assert found.details["db_commit#3"]["statements"][0].startswith("INSERT INTO idempotency_keys")


@pytest.mark.parametrize(
    ("flaw", "verdicts"), [("", {"exactly_once": 1}), ("unkeyed_downstream", {"duplicate": 1})]
)
def test_a_downstream_that_deduplicates_needs_the_key_forwarded(
    tmp_path: Path, flaw: str, verdicts: dict[str, int]
) -> None:
    env = {"INVOICES_SINK_URL": "{sink_url}", "INVOICES_DOWNSTREAM": "before_commit", "INVOICES_FLAW": flaw}
    data = invoice_scenario(mode="atomic", env=env)
    data["audit"] = {"effects": {"sink": {"dedupe_by_key": True}}}
    found = crashpoints(data, tmp_path, only=["downstream#1"])
    assert table(found) == {"downstream#1": verdicts}
    # The store is a SQLite file: its first call (intent 0) warms it up, intent 1 is the clean call.
    assert found.clean_intent == 1
    assert found.details["downstream#1"]["key"] == (None if flaw else found.audit.intents["key"][1])


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("keyed", {"db_commit#2": {"duplicate": 1}}),  # after the key was looked up (db_commit#1)
        ("atomic", {}),
        ("naive", {"db_commit#1": {"duplicate": 1}, "response": {"duplicate": 1}}),
    ],
)
def test_the_typescript_target_on_node_postgres(
    tmp_path: Path, postgres_server: None, node: str, mode: str, expected: dict[str, dict[str, int]]
) -> None:
    found = crashpoints(typescript(mode), tmp_path)
    assert {p.name: dict(p.verdicts) for p in found.findings if len(p.path) == 1} == expected
    assert everything_proven(found)


@pytest.mark.postgres
def test_the_reproducer_fails_on_the_bug_and_its_test_passes_on_the_fix(
    tmp_path: Path, postgres_server: None
) -> None:
    """The emitted files name no path of this machine, and run from another working directory: a
    repository with the server and, in tests/crash/, the reproducer and its test."""
    (invoice,) = parse_path("db_commit#2")
    invoice = replace(invoice, label="INSERT invoices")  # found by what it commits, as explored
    result = PointResult((invoice,), proven=[1], verdicts=Counter({"duplicate": 1}))
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    shutil.copytree(
        ROOT / "targets" / "invoices", repo / "server", ignore=shutil.ignore_patterns("__pycache__")
    )
    emitted = repo / "tests" / "crash"
    emitted.mkdir(parents=True)
    elsewhere.mkdir()
    data = on_postgres("keyed")
    data["target"]["command"][1] = "{scenario_dir}/server/server.py"  # as the user's scenario has it
    (repo / "chaos.yaml").write_text(yaml.safe_dump(data))
    path = emitted / emit.reproducer_name(result)
    path.write_text(emit.reproducer_text(load_scenario(repo / "chaos.yaml"), result, 1, emitted))
    test = emitted / f"test_{path.stem.replace('-', '_')}.py"
    test.write_text(emit.pytest_text(path.name, result), encoding="utf-8")
    for text in (path.read_text(), test.read_text()):
        for machine_path in (str(ROOT), str(tmp_path), sys.prefix):
            assert machine_path not in text
    reproducer = yaml.safe_load(path.read_text())
    assert reproducer["target"]["command"][1] == "{scenario_dir}/../../server/server.py"
    (hold,) = reproducer["faults"]["crash_points"]["holds"]
    assert (hold["at"], hold["commits"]) == ("db_commit#2", ["INSERT invoices"])

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, check=False, cwd=elsewhere)

    mcp_chaos = [sys.executable, "-m", "harness.cli", "run", "--results", "r", "--quiet", "--no-preflight"]
    found = run(*mcp_chaos, os.path.relpath(path, elsewhere))
    assert found.returncode == 1, found.stderr  # the gate: a duplicate
    assert "duplicate" in found.stdout
    still = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test))
    assert still.returncode == 1, still.stdout  # it asserts exactly once: it fails until the fix
    assert "'duplicate': 1" in still.stdout
    fixed = yaml.safe_load(path.read_text())
    fixed["target"]["env"]["INVOICES_MODE"] = "atomic"
    path.write_text(yaml.safe_dump(fixed), encoding="utf-8")
    passed = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test))
    assert passed.returncode == 0, passed.stdout + passed.stderr


def clusters_of(pid: int) -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), f"{CLUSTER_PREFIX}{pid}.*"))


def cli(tmp_path: Path, data: dict[str, Any], *args: str) -> subprocess.Popen[str]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    argv = [sys.executable, "-m", "harness.cli", "crashpoints", str(path), "--results", str(tmp_path / "r")]
    return subprocess.Popen(
        [*argv, "--run-id", "cp", "--jobs", "1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def history_pids(run_dir: Path) -> list[int]:
    path = run_dir / "history.jsonl"
    lines = path.read_bytes().splitlines() if path.exists() else []
    return [e["pid"] for e in map(orjson.loads, lines) if e["type"] in ("pod_started", "service_started")]


def gone(pids: list[int], paths: list[str], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(map(alive, pids)) and not any(map(os.path.exists, paths)):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.postgres
def test_ctrl_c_in_the_middle_leaves_nothing_behind(tmp_path: Path, postgres_server: None) -> None:
    proc = cli(tmp_path, on_postgres("keyed"), "--repeat", "3")
    history = tmp_path / "r" / "cp" / "history.jsonl"
    deadline = time.monotonic() + 60
    # In the middle: a try held and its pod killed and started again (on a loaded machine, the first
    # hold alone came before its kill, and Ctrl-C then never met a restarted pod).
    while time.monotonic() < deadline and (
        b'"held":true' not in (history.read_bytes() if history.exists() else b"")
        or len(history_pids(history.parent)) < 3
    ):
        time.sleep(0.05)
    clusters = clusters_of(proc.pid)
    assert clusters
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"mcp-chaos audit {history.parent}" in err
    pids = history_pids(history.parent)
    assert len(pids) >= 3  # PostgreSQL, the pod, the pod again after the first kill
    assert gone(pids, clusters), f"left: {[p for p in pids if alive(p)]}, {clusters}"


@pytest.mark.postgres
def test_a_clean_call_that_fails_stops_it_and_leaves_nothing_behind(
    tmp_path: Path, postgres_server: None
) -> None:
    """Refused by the preflight's first call, before anything is explored; without the preflight, by
    the exploration's clean call."""
    data = on_postgres("keyed")
    data["workload"]["arguments"]["amount_cents"] = 0  # refused: invalid_amount
    proc = cli(tmp_path, data)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert "preflight: the call of create_invoice did not succeed: tool_error" in err
    assert not (tmp_path / "r" / "cp" / "history.jsonl").exists()  # no exploration began
    proc = cli(tmp_path / "unchecked", data, "--no-preflight")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert "the clean call (intent 0, nothing held) was rejected" in err
    assert gone(history_pids(tmp_path / "unchecked" / "r" / "cp"), clusters_of(proc.pid))


def test_a_wrong_effect_source_fails_in_the_preflight_before_any_exploration(tmp_path: Path) -> None:
    """As ``run`` does: two real calls, each effect counted once, before the exploration. A query that
    counts by the wrong column explored a whole minute, then failed at the clean call (exit 4)."""
    data = invoice_scenario(mode="atomic")
    wrong = "SELECT customer_id AS marker, COUNT(*) AS effects FROM invoices GROUP BY customer_id"
    data["audit"]["effects"]["sql"]["query"] = wrong
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    done = mcp_chaos("crashpoints", path, "--results", tmp_path / "r", "--run-id", "cp")
    assert done.returncode == 2, done.stderr
    assert "mcp-chaos: error: preflight: create_invoice answered OK" in done.stderr
    assert "found 0 effects for the preflight marker" in done.stderr
    assert (tmp_path / "r" / "cp" / "cp.preflight" / "history.jsonl").is_file()  # the evidence, kept
    # The preflight's history only: no copy of the target explored anything.
    assert [p.parent.name for p in (tmp_path / "r" / "cp").glob("**/history.jsonl")] == ["cp.preflight"]


def on_image(image: str) -> dict[str, Any]:
    data = on_postgres("keyed")
    data["target"]["image"] = image
    del data["target"]["command"]
    return data


@pytest.mark.docker
@pytest.mark.postgres
def test_an_image_is_held_and_killed_at_its_commit(
    tmp_path: Path, postgres_server: None, docker_image: str
) -> None:
    data = on_image(docker_image)
    found = crashpoints(data, tmp_path, only=["db_commit#2", "db_commit#3"])
    assert table(found) == {"db_commit#2": {"duplicate": 1}, "db_commit#3": {"exactly_once": 1}}
    assert everything_proven(found)
    assert not [c for c in labelled_containers() if c.startswith(f"mcp-chaos-{found.run_dir.name}-")]


@pytest.mark.docker
@pytest.mark.postgres
def test_ctrl_c_on_an_image_leaves_no_container_and_no_cluster(
    tmp_path: Path, postgres_server: None, docker_image: str
) -> None:
    proc = cli(tmp_path, on_image(docker_image), "--repeat", "3")
    history = tmp_path / "r" / "cp" / "history.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and b'"held":true' not in (
        history.read_bytes() if history.exists() else b""
    ):
        time.sleep(0.05)
    clusters = clusters_of(proc.pid)
    assert clusters
    assert [c for c in labelled_containers() if c.startswith("mcp-chaos-cp-")]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert gone([], clusters)
    assert not [c for c in labelled_containers() if c.startswith("mcp-chaos-cp-")]


def pgclients(mode: str, **env: str) -> dict[str, Any]:
    """targets/pgclients (psycopg, sync) on the harness's PostgreSQL."""
    data = on_postgres(mode)
    data["target"]["command"] = ["{python}", str(ROOT / "targets" / "pgclients" / "server.py")]
    data["target"]["env"] = {"PGCLIENTS_DB": "{postgres_url}", "PGCLIENTS_MODE": mode, **env}
    return data


@pytest.mark.postgres
def test_an_event_stream_answer_is_held_whole_in_a_2025_session(
    tmp_path: Path, postgres_server: None
) -> None:
    """The reference target in stateful 2025 sessions, progress events before its answer: held at
    response, none of the answer reaches the client, so every try of the naive design duplicates."""
    data = on_postgres("naive", INVOICES_TRANSPORT="sse", INVOICES_SESSIONS="stateful")
    data["client"]["protocol"] = "2025-11-25"
    found = crashpoints(data, tmp_path, repeat=3, only=["response"])
    assert table(found) == {"response": {"duplicate": 3}}
    assert everything_proven(found)


@pytest.mark.postgres
def test_a_hold_that_leaks_the_answer_is_never_counted(
    tmp_path: Path, postgres_server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy that holds the way it used to: everything relayed as it came, the hold asked at the end.
    The client has its answer when the pod is killed (exactly once, by the count), so the try proves
    nothing: INCONCLUSIVE, never a pass."""
    from harness.faults import proxy

    async def leaky(
        self: proxy.FaultProxy,
        request: Any,
        writer: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        router: Router,
        ex: proxy.Exchange,
        cut: Any,  # a race's way to break the client stream: no crash plan asks for it
    ) -> bool:
        assert ex.intent is not None
        assert ex.attempt is not None
        where = (ex.intent, ex.attempt)  # its window is the exchange's, opened before this is called
        if not router.serving():
            return False
        if await router.reached(Reached(Site.PROXY, PointKind.REQUEST, attempt=where)) is not Decision.PASS:
            return False
        upstream[1].write(request.raw)
        watch = proxy.AnswerWatch(ex.request_id)
        while not watch.complete:
            data = await upstream[0].read(65536)
            if not data:
                return False
            watch.feed(data)
            writer.write(data)  # the answer too, before the hold is asked
        await writer.drain()
        back = Reached(Site.PROXY, PointKind.RESPONSE, attempt=where, answer=watch.refused)
        return await router.reached(back) is Decision.PASS

    monkeypatch.setattr(proxy.FaultProxy, "_hooked", leaky)
    found = crashpoints(on_postgres("naive"), tmp_path, repeat=1, only=["response"])
    (response,) = found.points
    assert response.proven == []
    assert set(response.unproven.values()) == {
        "the client got an answer though attempt 1 was held at response (it ended ok): the hold leaked"
    }
    assert response.finding is None
    assert response.inconclusive is not None
    assert render.conclusion(found) == "inconclusive"


@pytest.mark.parametrize("write", ["copy", "function", "cte"])
@pytest.mark.postgres
def test_writes_no_tag_tells_are_held_at_their_commit(
    tmp_path: Path, postgres_server: None, write: str
) -> None:
    """keyed, the invoice written with COPY FROM STDIN, a function that inserts, a data-modifying WITH:
    the duplicate at that commit (which no write tag announced) and nowhere else."""
    found = crashpoints(pgclients("keyed", PGCLIENTS_WRITE=write), tmp_path)
    assert not found.inconclusive
    single = {p.name: dict(p.verdicts) for p in found.points if len(p.path) == 1}
    dup = [name for name, verdicts in single.items() if "duplicate" in verdicts]
    (effect,) = dup
    label = found.details[effect]["label"]
    # The copy's transaction draws the invoice's id first (nextval): both are in its label.
    assert label.endswith(
        {"copy": "COPY invoices", "function": "CALL add_invoice", "cte": "INSERT invoices"}[write]
    )


@pytest.mark.postgres
def test_calls_that_commit_differently_are_held_by_what_they_commit(
    tmp_path: Path, postgres_server: None
) -> None:
    """The first call of a process commits a warm-up row first: db_commit#3 of the clean call is the
    invoice, db_commit#2 of a later one. The hold falls on the invoice, the advice quotes it, and the
    warm-up commit, never reached again by a try, is unproven: INCONCLUSIVE, exit 1."""
    found = crashpoints(pgclients("keyed", PGCLIENTS_WARMUP="1"), tmp_path)
    assert [p.label for p in found.clean][1:5] == [
        "INSERT warmup",
        "SELECT idempotency_keys",
        "INSERT invoices",
        "INSERT idempotency_keys",
    ]
    invoice = next(p for p in found.points if p.name == "db_commit#3")
    assert dict(invoice.verdicts) == {"duplicate": 1}
    (held,) = invoice.held[invoice.proven[0]]
    assert held.point.name == "db_commit#2"  # the same commit, at another index
    assert advice.advice(found, invoice).startswith("db_commit#3 committed the effect ('INSERT INTO invoices")
    warmup = next(p for p in found.points if p.name == "db_commit#1")
    assert warmup.proven == []
    assert "never reached db_commit#1 (INSERT warmup)" in str(warmup.inconclusive)


def test_a_scenario_with_no_hold_point_is_refused_with_what_would_give_one(tmp_path: Path) -> None:
    """A SQLite store whose file operations are not to be traced: nothing holds its commits."""
    path = tmp_path / "sqlite.yaml"
    path.write_text(yaml.safe_dump(invoice_scenario(mode="naive", faults={"crash_points": {"files": False}})))
    done = mcp_chaos("crashpoints", path, "--results", tmp_path / "r", "--jobs", "1")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "no hold point" in line
    assert "{postgres_url}" in line
    assert "{sink_url}" in line
    assert "faults.crash_points.files: false" in line
    assert not (tmp_path / "r").exists()


def test_an_emit_directory_that_cannot_be_is_refused_before_any_work(tmp_path: Path) -> None:
    """Found after the whole exploration, it ended in a traceback and no table was printed."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(on_postgres("keyed")))
    (tmp_path / "a-file").write_text("")
    for where, said in [("a-file", "is a file, not a directory"), ("a-file/sub", "cannot be made")]:
        done = mcp_chaos(
            "crashpoints", path, "--results", tmp_path / "r", "--jobs", "1", "--emit", tmp_path / where
        )
        assert done.returncode == 2
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"mcp-chaos: error: --emit {tmp_path / where}: {said}")
    assert not (tmp_path / "r").exists()


@pytest.mark.postgres
def test_a_store_changed_behind_the_proxy_is_inconclusive(tmp_path: Path, postgres_server: None) -> None:
    """The target writes to a cluster of its own, not through {postgres_url}: the clean call's effect is
    there, and the proxy saw no commit of the call."""

    async def go() -> Exploration:
        own = Postgres(tmp_path, "own", free_port())
        await own.start()
        try:
            data = pgclients("naive")
            data["target"]["env"]["PGCLIENTS_DB"] = own.url
            data["target"]["env"]["UNUSED"] = "{postgres_url}"
            data["audit"]["effects"]["sql"]["url"] = own.url
            planned = prepare(parse_scenario(data), tmp_path / "results", ExploreOptions())
            return await explore(planned, out=io.StringIO(), progress_interval_s=None)
        finally:
            await own.stop()

    found = asyncio.run(go())
    assert found.bypassed is not None
    assert found.bypassed.startswith("the store changed (1 effect of the clean call) while the harness saw")
    assert found.inconclusive[0] == found.bypassed


@pytest.mark.postgres
def test_the_request_point_is_a_true_control(tmp_path: Path, postgres_server: None) -> None:
    """A fast naive server that calls its downstream first: held at request, nothing of the call ran, so
    every try is exactly once (the kill used to land after the downstream call)."""
    env = {"INVOICES_SINK_URL": "{sink_url}", "INVOICES_DOWNSTREAM": "before_commit"}
    data = on_postgres("naive", **env)
    data["audit"] = {"effects": {"sink": {}}}
    found = crashpoints(data, tmp_path, repeat=6, only=["request"])
    assert table(found) == {"request": {"exactly_once": 6}}
    assert everything_proven(found)


@pytest.mark.postgres
def test_a_pod_that_never_answers_after_a_kill_is_an_unavailable_finding(
    tmp_path: Path, postgres_server: None
) -> None:
    """Every call takes a lock row (its first commit) and waits while one is there: killed while it holds
    it, the restarted pod waits for ever. The exploration stops on it and names the point: a finding
    (UNAVAILABLE, exit 1), not an exploration that merely ended early."""
    data = pgclients("atomic", PGCLIENTS_LOCK="row")
    data["target"]["unavailable_after_s"] = 2
    data["client"]["attempt_timeout_s"] = 0.5
    found = crashpoints(data, tmp_path, only=["db_commit#1"])
    assert [p.label for p in found.clean][1] == "INSERT locks"
    (stuck,) = found.unavailable
    assert stuck.name == "db_commit#1"
    assert "answered none of" in str(stuck.unavailable)
    assert render.conclusion(found) == "finding"
    assert render.result_of(stuck) == "UNAVAILABLE"
    assert render.summary_line(found).split("; ")[1].startswith("UNAVAILABLE after a kill at db_commit#1")
    assert as_json(found)["unavailable"] == ["db_commit#1"]
    assert "## db_commit#1: unavailable" in render_markdown(found)
    assert not any(p.startswith("the exploration ended early") for p in found.inconclusive)


@pytest.mark.postgres
def test_a_malformed_frame_is_answered_by_postgresql_not_by_a_traceback(
    tmp_path: Path, postgres_server: None
) -> None:
    """A Parse without its NUL terminators, in the same write as the StartupMessage: the proxy used to
    raise ValueError in asyncio's client_connected_cb; now it relays it and PostgreSQL answers an error."""

    async def go() -> tuple[bytes, list[dict[str, Any]]]:
        pg = Postgres(tmp_path, "malformed", free_port())
        holds = Router(plan_for(CrashPoints.model_validate({"holds": [{"at": "db_commit#1"}]})))
        proxy = PostgresProxy(pg.port, holds)
        unhandled: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: unhandled.append(context))
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            holds.attach(history, lambda **_: True, lambda: True)
            await pg.start()
            await proxy.start()
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                params = b"user\x00postgres\x00database\x00malformed\x00\x00"
                startup = (8 + len(params)).to_bytes(4, "big") + STARTUP_V3.to_bytes(4, "big") + params
                body = b"no terminators at all"
                writer.write(startup + b"P" + (4 + len(body)).to_bytes(4, "big") + body)
                await writer.drain()
                answer = b""
                with contextlib.suppress(asyncio.TimeoutError):
                    while chunk := await asyncio.wait_for(reader.read(65536), 5):
                        answer += chunk
                writer.close()
                return answer, unhandled
            finally:
                await proxy.close()
                await pg.stop()

    answer, unhandled = asyncio.run(go())
    assert unhandled == []
    assert b"R\x00\x00\x00\x08\x00\x00\x00\x00" in answer  # authenticated: the startup went through
    assert b"E" in answer.split(b"Z\x00\x00\x00\x05I", 1)[1]  # then PostgreSQL's own ErrorResponse


def test_a_set_of_crash_points_is_judged_at_the_one_call_an_exploration_makes(tmp_path: Path) -> None:
    """``--set faults.crash_points.files=false`` on a scenario run at concurrency 4: the exploration
    makes one call at a time anyway, so the override is judged at that (here: no hold point left);
    it was refused for the scenario's own concurrency ("needs workload.concurrency 1")."""
    data = invoice_scenario(mode="naive")
    data["workload"]["concurrency"] = 4
    path = tmp_path / "sqlite.yaml"
    path.write_text(yaml.safe_dump(data))
    done = mcp_chaos(
        "crashpoints",
        path,
        "--results",
        tmp_path / "r",
        "--jobs",
        "1",
        "--set",
        "faults.crash_points.files=false",
    )
    assert done.returncode == 2
    assert "no hold point" in done.stderr
    assert "concurrency" not in done.stderr
