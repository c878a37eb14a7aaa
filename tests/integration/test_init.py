"""`mcp-chaos init`, then `mcp-chaos run`, with no hand edits, for every shape of reference server.

Each case starts a real server through `init` (which lists its tools and looks at
the store it created, named in its command line or environment), runs the drafted
scenario (preflight included) on a small workload, and checks the audit: the
atomic target gives exactly one effect per intent. Where `init` cannot see the
store, it leaves the effect source as TODO, and only that is filled in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from harness.loopback import free_port
from tests.helpers.cli import mcp_chaos
from tests.helpers.paths import INVOICES, PROVIDER, ROOT, TS_DIR
from tests.helpers.third_party import (
    EARLY_SDK,
    HOME_NOTES,
    LEDGER,
    PLAIN_TEXT,
    TASKS,
    TODO_LIST,
    TORN_DOCUMENT,
)

pytestmark = pytest.mark.integration

ATOMIC = ["--env", "INVOICES_MODE=atomic", "--env", "INVOICES_DB={data_dir}/invoices.db"]


def init_then_run(tmp_path: Path, *init: str, sets: tuple[str, ...] = ()) -> tuple[dict[str, object], str]:
    made = mcp_chaos("init", *init, "-o", "drafted.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "mcp-chaos run drafted.yaml" in made.stdout
    drafted = yaml.safe_load((tmp_path / "drafted.yaml").read_text())
    assert drafted["gate"] == {
        "fail_on": [
            "unavailable",
            "store_unreadable",
            "duplicate",
            "lost",
            "applied_despite_error",
            "inconclusive",
        ]
    }
    overrides = [
        arg for s in ("workload.intents=150", "workload.concurrency=4", *sets) for arg in ("--set", s)
    ]
    # A few intents, for speed, are too few for the drafted kills: an inconclusive run, which the
    # drafted gate fails, and which is not what these tests check.
    ran = mcp_chaos("run", "drafted.yaml", "--quiet", "--allow-inconclusive", *overrides, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "preflight: 2 calls of create_invoice, 1 effect under each marker" in ran.stderr
    assert "exactly_once |     150 |" in ran.stdout, ran.stdout
    return drafted, ran.stdout


def test_an_http_server_of_the_current_protocol(tmp_path: Path) -> None:
    drafted, out = init_then_run(tmp_path, "--command", f"{sys.executable} {INVOICES}", *ATOMIC)
    assert drafted["workload"]["arguments"]["memo"] == "{marker}"  # type: ignore[index]
    assert drafted["workload"]["arguments"]["idempotency_key"] == "{key}"  # type: ignore[index]
    assert drafted["audit"] == {  # found in the table the server created
        "effects": {
            "sql": {
                "url": "sqlite:///{data_dir}/invoices.db",
                "query": 'SELECT "memo" AS marker, COUNT(*) AS effects FROM "invoices" GROUP BY "memo"',
            }
        }
    }
    assert "protocol: 2026-07-28" in out


def test_a_stdio_server(tmp_path: Path) -> None:
    drafted, out = init_then_run(
        tmp_path,
        "--command",
        f"{sys.executable} {INVOICES}",
        "--transport",
        "stdio",
        "--env",
        "INVOICES_TRANSPORT=stdio",
        *ATOMIC,
    )
    assert drafted["target"]["transport"] == "stdio"  # type: ignore[index]
    assert "protocol: 2025-11-25" in out


@pytest.mark.postgres
def test_a_typescript_sdk_server_with_2025_sessions_and_postgres(
    tmp_path: Path, node: str, postgres_server: None
) -> None:
    command = f"{node} {TS_DIR / 'server.mjs'}"
    drafted, out = init_then_run(
        tmp_path, "--command", command, "--env", "INVOICES_MODE=atomic", "--env", "INVOICES_DB={postgres_url}"
    )
    assert drafted["services"] == {"postgres": {}}
    assert drafted["audit"]["effects"]["sql"]["url"] == "{postgres_url}"  # type: ignore[index]
    assert "protocol: 2025-11-25; sessions:" in out


@pytest.mark.docker
def test_an_image(tmp_path: Path, docker_image: str) -> None:
    drafted, _ = init_then_run(tmp_path, "--image", docker_image, *ATOMIC)
    assert drafted["target"]["image"] == docker_image  # type: ignore[index]


def test_a_store_init_cannot_see_leaves_only_the_effect_source_to_fill_in(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere" / "invoices.db"
    store.parent.mkdir()
    made = mcp_chaos(
        "init",
        "--command",
        f"{sys.executable} {INVOICES}",
        "--env",
        "INVOICES_MODE=atomic",
        "--env",
        f"INVOICES_DB={store}",
        "-o",
        "drafted.yaml",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    drafted = tmp_path / "drafted.yaml"
    todos = [line for line in drafted.read_text().splitlines() if "TODO" in line]
    assert f"do what its {len(todos)} TODO line(s) say and delete them" in made.stdout
    refused = mcp_chaos("validate", "drafted.yaml", cwd=tmp_path)
    assert refused.returncode == 2
    assert "audit.effects.sql.url still says TODO (left by mcp-chaos init): fill it in" in refused.stderr
    # The values given, the comments left: still refused, at the comment's line.
    query = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
    given = ("--set", f"audit.effects.sql.url=sqlite:///{store}", "--set", f"audit.effects.sql.query={query}")
    commented = mcp_chaos("validate", "drafted.yaml", *given, cwd=tmp_path)
    assert commented.returncode == 2
    number = next(n for n, line in enumerate(drafted.read_text().splitlines(), 1) if "# TODO" in line)
    assert (
        f"drafted.yaml:{number}: a comment still says TODO (left by mcp-chaos init): do what it says, "
        "then delete it"
    ) in commented.stderr
    drafted.write_text("".join(line for line in drafted.read_text().splitlines(True) if "# TODO" not in line))
    store.unlink()  # init's own start created it; the run starts from an empty store
    ran = mcp_chaos(
        "run",
        "drafted.yaml",
        "--quiet",
        "--allow-inconclusive",
        "--set",
        "workload.intents=100",
        *given,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert "exactly_once |     100 |" in ran.stdout


def test_init_refuses_to_overwrite_and_names_unknown_tools(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("mine")
    kept = mcp_chaos("init", "--command", f"{sys.executable} {INVOICES}", cwd=tmp_path)
    assert kept.returncode == 2
    assert "scenario.yaml already exists" in kept.stderr
    assert (tmp_path / "scenario.yaml").read_text() == "mine"
    unknown = mcp_chaos(
        "init",
        "--command",
        f"{sys.executable} {INVOICES}",
        *ATOMIC,
        "--tool",
        "nope",
        "-o",
        "x.yaml",
        cwd=tmp_path,
    )
    assert unknown.returncode == 2
    assert "--tool 'nope' is not one of the server's tools: count_invoices, create_invoice" in unknown.stderr


def test_a_listing_cut_after_its_pages_is_said_not_taken_for_the_whole(tmp_path: Path) -> None:
    """A server with more tools than 20 pages list: init reads those pages and says so, where it said
    "none of the server's tools seems to change state" and "--tool ... is not one of the server's
    tools" of a tool on page 21 as if the listing were whole."""
    server = tmp_path / "ledger.py"
    server.write_text(LEDGER)
    command = ("--command", f"{sys.executable} {server}", "--env", "LEDGER_FILE={data_dir}/ledger.jsonl")
    for asked in ((), ("--tool", "record_entry")):
        made = mcp_chaos("init", *command, "--env", "LEDGER_FILLER=41", *asked, "-o", "x.yaml", cwd=tmp_path)
        assert made.returncode == 2, made.stderr
        assert "(tools/list went on past 20 pages; only their 40 tools were read)" in made.stderr


def test_init_against_a_server_that_will_not_start(tmp_path: Path) -> None:
    command = f"{sys.executable} -c 'print(\"no config\"); raise SystemExit(3)'"
    failed = mcp_chaos("init", "--command", command, cwd=tmp_path)
    assert failed.returncode == 3
    assert failed.stderr.count("mcp-chaos: error:") == 1
    assert "  | no config" in failed.stderr  # the log's tail
    assert not (tmp_path / "scenario.yaml").exists()
    # The log the error names is kept (init's throwaway directory stays when the server would not start).
    found = re.search(r"\(log: (\S+)\)", failed.stderr)
    assert found is not None, failed.stderr
    log = Path(found[1])
    try:
        assert "no config" in log.read_text()
        assert f"init kept {log.parents[2]} for that log (mcp-chaos cleanup removes it)" in failed.stderr
    finally:
        shutil.rmtree(log.parents[2])


NOTES = ROOT / "targets" / "notes" / "server.py"


def test_a_database_named_on_the_command_line_and_made_at_the_first_write(tmp_path: Path) -> None:
    """`--db-path {data_dir}/app.db`, a SQLite file the server makes at its first write: init calls the
    tool once in its own data directory, sees the table, drafts the query; the draft needs no edit."""
    command = f"{sys.executable} {NOTES} --db-path {{data_dir}}/app.db"
    made = mcp_chaos("init", "--command", command, "--transport", "stdio", "-o", "drafted.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "init: add_note stored title in sqlite:///{data_dir}/app.db, field title" in made.stderr
    text = (tmp_path / "drafted.yaml").read_text()
    drafted = yaml.safe_load(text)
    assert drafted["name"] == "reference-notes-chaos"  # what the server calls itself
    assert drafted["workload"]["tool"] == "add_note"
    assert drafted["workload"]["arguments"] == {"title": "{marker}", "body": "body-{index}"}
    assert drafted["audit"] == {
        "effects": {
            "sql": {
                "url": "sqlite:///{data_dir}/app.db",
                "query": 'SELECT "title" AS marker, COUNT(*) AS effects FROM "notes" GROUP BY "title"',
            }
        }
    }
    assert "TODO" not in text
    assert "$PORT" not in text  # a stdio server is given no port
    assert "over the process's stdin and stdout" in text
    assert "idempotency key goes in" not in text
    checked = mcp_chaos("validate", "--preflight", "drafted.yaml", "--results", "r", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "preflight: 2 calls of add_note, 1 effect under each marker (audit.effects.sql)" in checked.stderr


@pytest.mark.parametrize(
    ("source", "env", "pattern", "fmt"),
    [
        (TODO_LIST, "TODO_FILE={data_dir}/todo.txt", "todo.txt", "lines"),
        (TORN_DOCUMENT, "TASKS_FILE={data_dir}/tasks.json", "tasks.json", "json"),
    ],
    ids=["text_list", "json_document"],
)
def test_a_file_store_is_drafted_in_the_format_its_file_is_in(
    tmp_path: Path, source: str, env: str, pattern: str, fmt: str
) -> None:
    """A plain-text list and a JSON document named in the environment, each made at the first write:
    init calls the tool once, and drafts a files source in the format it saw the file in, so a file
    that later does not parse so is a store its server cannot read."""
    server = tmp_path / "server.py"
    server.write_text(source)
    command = f"{sys.executable} {server}"
    made = mcp_chaos(
        "init", "--command", command, "--transport", "stdio", "--env", env, "-o", "drafted.yaml", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    drafted = yaml.safe_load((tmp_path / "drafted.yaml").read_text())
    assert drafted["audit"] == {
        "effects": {"files": {"dir": "{data_dir}", "pattern": pattern, "marker_in": "content", "format": fmt}}
    }
    checked = mcp_chaos("validate", "--preflight", "drafted.yaml", "--results", "r", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "1 effect under each marker (audit.effects.files)" in checked.stderr


def test_identifiers_the_server_refused_in_the_trial_call_are_left_as_todos(tmp_path: Path) -> None:
    """The trial call (the store is made at the first write) sent db_name-0 and contact_id-0; the server
    answered OK with its SQL error and stored nothing. Both identifiers become TODOs that quote it, and
    the scenario will not run until they are named."""
    records = ROOT / "tests" / "integration" / "records.py"
    command = f"{sys.executable} {records} --db-path {{data_dir}}/app.db"
    made = mcp_chaos("init", "--command", command, "--transport", "stdio", "-o", "drafted.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (
        'add_record refused the call: Error adding record: relation "records" does not exist' in made.stderr
    )
    text = (tmp_path / "drafted.yaml").read_text()
    arguments = yaml.safe_load(text)["workload"]["arguments"]
    assert arguments["db_name"] == "TODO: an existing db name"
    assert arguments["contact_id"] == "TODO: an existing contact id"
    assert arguments["note"] == "{marker}"
    comments = " ".join(line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#"))
    for name in ("db_name", "contact_id"):
        assert (
            f"TODO: {name} was drafted as '{name}-0', and the server refused the trial call with it: "
            "'Error adding record: relation \"records\" does not exist'; name one that exists"
        ) in comments
    refused = mcp_chaos("validate", "drafted.yaml", cwd=tmp_path)
    assert refused.returncode == 2
    assert "TODO" in refused.stderr


def test_an_api_base_url_in_the_environment_is_drafted_behind_the_downstream_proxy(tmp_path: Path) -> None:
    """A server that calls an API whose base URL it is given, and whose own store init cannot see: init
    points the variable at the downstream proxy, names the API as its upstream and counts the effects at
    the proxy. The drafted scenario then runs with no edit, against the user's fake of the API."""
    store = tmp_path / "elsewhere" / "invoices.db"
    store.parent.mkdir()
    port = free_port()
    with subprocess.Popen(
        [sys.executable, str(PROVIDER), str(port)], stdout=subprocess.PIPE, text=True
    ) as fake:
        try:
            assert fake.stdout is not None
            assert "listening" in fake.stdout.readline()
            # The provider is called before the invoice is recorded, with the key, and deduplicates by it;
            # called after the commit (the default), a kill between the two loses the call for good: the
            # retry replays the stored invoice. init's draft finds that too (lost), as it should.
            env = [
                f"INVOICES_DB={store}",
                f"INVOICES_SINK_URL=http://127.0.0.1:{port}/v1/charges",
                "INVOICES_DOWNSTREAM=before_commit",
            ]
            made = mcp_chaos(
                "init",
                "--command",
                f"{sys.executable} {INVOICES}",
                *(arg for e in ["INVOICES_MODE=atomic", *env] for arg in ("--env", e)),
                "-o",
                "drafted.yaml",
                cwd=tmp_path,
            )
            assert made.returncode == 0, made.stderr
            drafted = yaml.safe_load((tmp_path / "drafted.yaml").read_text())
            assert drafted["target"]["env"]["INVOICES_SINK_URL"] == "{downstream_url}/v1/charges"
            assert drafted["services"] == {"downstream": {"upstream": f"http://127.0.0.1:{port}"}}
            assert drafted["audit"] == {"effects": {"downstream": {}}}
            assert "TODO" not in (tmp_path / "drafted.yaml").read_text()
            store.unlink()  # init's own start created it; the run starts from an empty store
            ran = mcp_chaos(
                "run",
                "drafted.yaml",
                "--quiet",
                "--allow-inconclusive",
                "--set",
                "workload.intents=60",
                cwd=tmp_path,
            )
            assert ran.returncode == 0, ran.stderr
            assert "preflight: 2 calls of create_invoice, 1 effect under each marker" in ran.stderr
            assert "exactly_once |      60 |" in ran.stdout, ran.stdout
            charges = httpx.get(f"http://127.0.0.1:{port}/v1/charges", trust_env=False).json()["data"]
            assert (
                len({c["marker"] for c in charges}) == len(charges) == 62
            )  # the preflight's two, and the run's
        finally:
            fake.kill()


# -- init chooses by trying (decision 0076): each likeliest tool called once in a copy of the server


def init_server(tmp_path: Path, source: str, *args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    server = tmp_path / "server.py"
    server.write_text(source)
    made = mcp_chaos(
        "init", "--command", f"{sys.executable} {server}", *args, "-o", "drafted.yaml", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    return made, (tmp_path / "drafted.yaml").read_text()


def preflight_passes(tmp_path: Path) -> str:
    checked = mcp_chaos("validate", "--preflight", "drafted.yaml", "--results", "r", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    return checked.stderr


def test_the_tool_is_the_one_whose_call_left_a_record_and_the_field_the_one_the_store_keeps(
    tmp_path: Path,
) -> None:
    """plan_task looks likeliest (it "creates", takes a key) and stores nothing; create_pull_request is
    refused; add_task stores its notes in the column details. init chose plan_task before."""
    made, text = init_server(tmp_path, TASKS, "--env", "TASKS_DB={data_dir}/tasks.db")
    assert "init: plan_task answered ok and stored nothing init could find" in made.stderr, made.stderr
    assert "init: create_pull_request refused the call" in made.stderr, made.stderr
    drafted = yaml.safe_load(text)
    assert drafted["workload"]["tool"] == "add_task"
    assert drafted["workload"]["arguments"] == {"title": "title-{index}", "notes": "{marker}"}
    assert drafted["audit"]["effects"] == {
        "sql": {
            "url": "sqlite:///{data_dir}/tasks.db",
            "query": 'SELECT "details" AS marker, COUNT(*) AS effects FROM "tasks" GROUP BY "details"',
        }
    }
    assert "TODO" not in text
    assert "preflight: 2 calls of add_task, 1 effect under each marker" in preflight_passes(tmp_path), (
        made.stderr
    )


def test_the_marker_s_field_is_counted_by_the_name_the_store_gives_it(tmp_path: Path) -> None:
    """write_note(name, content) keeps content as body: the drafted marker_field was content, and no
    record has one."""
    command = f"{sys.executable} {NOTES}"
    made = mcp_chaos(
        "init", "--command", command, "--transport", "stdio", "--env", "NOTES_FILE={data_dir}/notes.jsonl",
        "--tool", "write_note", "-o", "drafted.yaml", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    drafted = yaml.safe_load((tmp_path / "drafted.yaml").read_text())
    assert drafted["workload"]["arguments"]["content"] == "{marker}"
    assert drafted["audit"]["effects"] == {
        "jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "body"}
    }
    assert "preflight: 2 calls of write_note, 1 effect under each marker" in preflight_passes(tmp_path)


def test_a_stdio_server_that_speaks_only_2024_11_05_is_drafted_and_checked(tmp_path: Path) -> None:
    """Servers that pin an early SDK answer initialize with 2024-11-05, whose stdio messages are those a
    run sends; init stopped at the handshake ("the server chose protocol version '2024-11-05'")."""
    env = "ENTRY_FILE={data_dir}/e.jsonl"
    made, text = init_server(tmp_path, EARLY_SDK, "--transport", "stdio", "--env", env)
    assert "spoke 2024-11-05" in " ".join(text.split()), made.stderr
    assert yaml.safe_load(text)["audit"]["effects"] == {
        "jsonl": {"path": "{data_dir}/e.jsonl", "marker_field": "text"}
    }
    assert "preflight: 2 calls of create_entry, 1 effect under each marker" in preflight_passes(tmp_path)


def test_a_plain_text_store_is_counted_in_its_file(tmp_path: Path) -> None:
    """A todo.txt store: it was drafted as a SQL store with a query to write."""
    made, text = init_server(tmp_path, PLAIN_TEXT, "--env", "TODO_FILE={data_dir}/todo.txt")
    assert yaml.safe_load(text)["audit"]["effects"] == {
        "files": {"dir": "{data_dir}", "pattern": "todo.txt", "marker_in": "content", "format": "lines"}
    }, made.stderr
    assert "TODO:" not in text
    assert "preflight: 2 calls of add_todo, 1 effect under each marker" in preflight_passes(tmp_path)


def test_a_store_under_home_is_found_there_and_home_pointed_into_the_data_directory(tmp_path: Path) -> None:
    """A server that keeps its notes under ~/.config, with no option to move them: init's copy had a home
    of its own (the user's was not written), found the store in it, and the draft gives the run's server
    {data_dir}/home. It got no hint before."""
    made, text = init_server(tmp_path, HOME_NOTES)
    assert "init: create_note stored title in {data_dir}/home/.config/home-notes/notes.json" in made.stderr
    drafted = yaml.safe_load(text)
    assert drafted["target"]["env"] == {"HOME": "{data_dir}/home"}
    assert drafted["audit"]["effects"] == {
        "files": {
            "dir": "{data_dir}/home/.config/home-notes",
            "pattern": "notes.json",
            "marker_in": "content",
            "format": "json",
        }
    }
    assert "under its home directory (~/.config/home-notes/notes.json)" in " ".join(text.split())
    assert not (Path.home() / ".config" / "home-notes").exists()
    assert "preflight: 2 calls of create_note, 1 effect under each marker" in preflight_passes(tmp_path)


def test_a_call_that_stored_nothing_says_where_the_store_may_be_and_how_to_point_it(tmp_path: Path) -> None:
    made, text = init_server(tmp_path, TASKS, "--env", "TASKS_DB={data_dir}/tasks.db", "--tool", "plan_task")
    assert "init: plan_task answered ok and stored nothing init could find" in made.stderr, made.stderr
    said = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "TODO: no call init tried left a record in {data_dir}" in said
    assert "~/.config/<name>" in said
    assert "point it into {data_dir} with the server's option or environment variable" in said


@pytest.mark.postgres
def test_init_offers_races_where_the_draft_reaches_the_harness_postgresql(
    tmp_path: Path, postgres_server: None
) -> None:
    on_postgres = ["--env", "INVOICES_MODE=keyed", "--env", "INVOICES_DB={postgres_url}"]
    for store, offered in ((on_postgres, True), (ATOMIC, False)):
        made = mcp_chaos(
            "init",
            "--command",
            f"{sys.executable} {INVOICES}",
            *store,
            "-o",
            "d.yaml",
            "--force",
            cwd=tmp_path,
        )
        assert made.returncode == 0, made.stderr
        assert ("  mcp-chaos races d.yaml" in made.stdout) is offered, made.stdout
        head = " ".join(w for w in (tmp_path / "d.yaml").read_text().split() if w != "#")
        assert ("mcp-chaos races THIS_FILE" in head) is offered
