"""The crash points' self-check: every PostgreSQL client × protocol era × reply form, naive and atomic.

A crash point that says "no finding" certifies a server. So the harness must find the naive
design's duplicate at its commit, and at its answer, in every try, whatever the library commits
with (psycopg sync and async, asyncpg's row-limited Execute, SQLAlchemy's pool, node-postgres),
whichever protocol era the client speaks (2026-07-28 stateless, 2025-11-25 sessions; the
TypeScript SDK speaks 2025-11-25 only, stateless and in sessions) and however
the answer comes (a JSON body, an event stream with a progress event before the answer); and it
must find nothing on the one-transaction design. The keyed design duplicates in exactly its one
window, between the business commit and the key record. No failpoint anywhere: the targets are
``targets/pgclients`` (Python) and ``targets/invoices-ts`` (TypeScript, node-postgres).

The library decides how a commit reaches PostgreSQL (the ``db_commit`` points); the era and the
reply form decide how the answer is withheld (``response``): the two are independent, so by
default each design runs a covering set, every library once with the four era and reply forms
rotated over them (15 explorations, each library in both reply forms across the designs). The
whole product, 45 explorations, runs with ``MCP_CHAOS_FULL_MATRIX=1`` (the nightly job's
``make matrix``).
"""

from __future__ import annotations

import asyncio
import io
import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from harness.crashpoints.explore import Exploration, explore, prepare
from harness.crashpoints.options import ExploreOptions
from harness.scenario import parse_scenario
from tests.helpers.paths import ROOT, TS_DIR
from tests.helpers.scenarios import invoice_scenario

pytestmark = [pytest.mark.quality, pytest.mark.postgres]

QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
PYTHON_CLIENTS = ["psycopg", "psycopg-async", "asyncpg", "sqlalchemy"]
CLIENTS = [*PYTHON_CLIENTS, "node-postgres"]
ERAS = ["2026-07-28", "2025-11-25"]
"""2026-07-28 is stateless; the 2025 era is spoken in sessions (stateful servers)."""
REPLIES = ["json", "sse"]
REPEAT = 3
FULL = os.environ.get("MCP_CHAOS_FULL_MATRIX") == "1"


def matrix(rotation: int) -> list[tuple[str, str, str]]:
    """(client, era, reply): the whole product, or each client once with the era and reply forms
    rotated by ``rotation`` (a different rotation per design, so a client meets both reply forms)."""
    forms = list(itertools.product(ERAS, REPLIES))
    if FULL:
        return [(client, *form) for client in CLIENTS for form in forms]
    return [(client, *forms[(i + rotation) % len(forms)]) for i, client in enumerate(CLIENTS)]


def scenario(client: str, mode: str, era: str = "2026-07-28", reply: str = "json") -> dict[str, Any]:
    """The TypeScript SDK speaks no 2026-07-28 yet: its 'newer era' is 2025-11-25 without sessions."""
    data = invoice_scenario(mode=mode)
    sessions = "stateless" if era == "2026-07-28" else "stateful"
    protocol = "2025-11-25" if client == "node-postgres" else era
    if client == "node-postgres":
        data["target"]["command"] = ["node", str(TS_DIR / "server.mjs")]
        env = {"INVOICES_DB": "{postgres_url}", "INVOICES_MODE": mode}
        env |= {"INVOICES_TRANSPORT": reply, "INVOICES_SESSIONS": sessions.replace("stateful", "sessions")}
    else:
        data["target"]["command"] = ["{python}", str(ROOT / "targets" / "pgclients" / "server.py")]
        env = {"PGCLIENTS_DB": "{postgres_url}", "PGCLIENTS_DRIVER": client, "PGCLIENTS_MODE": mode}
        env |= {"PGCLIENTS_TRANSPORT": reply, "PGCLIENTS_SESSIONS": sessions}
    data["target"]["env"] = env
    data["services"] = {"postgres": {}}
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": QUERY}}}
    data["client"]["protocol"] = protocol
    return data


def crashpoints(
    data: dict[str, Any], tmp_path: Path, *, repeat: int = 1, only: list[str] | None = None
) -> Exploration:
    options = ExploreOptions(repeat=repeat, budget_s=1800, only=tuple(only) if only else None)
    planned = prepare(parse_scenario(data), tmp_path / "results", options)
    return asyncio.run(explore(planned, out=io.StringIO(), progress_interval_s=None))


def singles(found: Exploration) -> dict[str, dict[str, int]]:
    return {p.name: {v: n for v, n in p.verdicts.items() if n} for p in found.points if len(p.path) == 1}


@pytest.fixture
def needs(request: pytest.FixtureRequest) -> None:
    """node-postgres needs Node.js and the TypeScript target's packages (skipped with the reason)."""
    if request.node.callspec.params.get("client") == "node-postgres":
        request.getfixturevalue("node")


@pytest.mark.parametrize(("client", "era", "reply"), matrix(0))
def test_naive_duplicates_at_its_commit_and_its_answer_in_every_try(
    tmp_path: Path, postgres_server: None, needs: None, client: str, era: str, reply: str
) -> None:
    found = crashpoints(
        scenario(client, "naive", era, reply), tmp_path, repeat=REPEAT, only=["db_commit#1", "response"]
    )
    commit = next(p for p in found.clean if p.name == "db_commit#1")
    assert commit.label == "INSERT invoices", found.clean  # the effect's own commit, whatever the library
    assert singles(found) == {"db_commit#1": {"duplicate": REPEAT}, "response": {"duplicate": REPEAT}}
    assert all(len(p.proven) == REPEAT and not p.unproven for p in found.points), found.inconclusive
    assert not found.inconclusive


@pytest.mark.parametrize(("client", "era", "reply"), matrix(3))
def test_one_transaction_shows_nothing_at_any_point(
    tmp_path: Path, postgres_server: None, needs: None, client: str, era: str, reply: str
) -> None:
    found = crashpoints(scenario(client, "atomic", era, reply), tmp_path)
    assert found.findings == []
    assert not found.inconclusive, found.inconclusive  # every point of the call, each try proven
    labels = [p.label for p in found.clean if p.label]
    assert any("INSERT invoices" in label and "INSERT idempotency_keys" in label for label in labels)


@pytest.mark.parametrize("client", CLIENTS)
def test_keyed_duplicates_in_exactly_its_one_window(
    tmp_path: Path, postgres_server: None, needs: None, client: str
) -> None:
    """Between the business commit and the key record, and nowhere else: a crash before the invoice
    leaves nothing, after the key record the retry replays. asyncpg's pool resets a connection it takes
    back (a commit of its own), so there the window has two points."""
    found = crashpoints(scenario(client, "keyed"), tmp_path)
    assert not found.inconclusive, found.inconclusive
    names = [p.name for p in found.clean]
    labels = [p.label for p in found.clean]
    effect, record = labels.index("INSERT invoices"), labels.index("INSERT idempotency_keys")
    window = set(names[effect:record])
    assert singles(found) == {
        name: {"duplicate": 1} if name in window else {"exactly_once": 1} for name in names
    }
