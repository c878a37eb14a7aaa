"""The options of a crash exploration: one table, the same names, defaults and bounds in every command
that explores, and the old spellings still taken with a notice."""

from __future__ import annotations

import argparse

import pytest

from harness.cli import build_parser
from harness.cli.options import explore_options
from harness.crashpoints.explore import store_files
from harness.crashpoints.options import SPECS, ExploreOptions, read_options
from harness.errors import UsageError
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario

GIVEN = ["--repeat", "3", "--budget", "45.5", "--no-power-loss", "--jobs", "2"]


def options(command: str, *argv: str) -> ExploreOptions:
    args = build_parser().parse_args([command, "s.yaml", *argv])
    return explore_options(args, command)


@pytest.mark.parametrize("command", ["crashpoints", "contract"])
def test_crashpoints_and_contract_take_the_same_options_with_the_same_defaults(command: str) -> None:
    """``contract`` had ``--crash-power-loss`` off where ``crashpoints`` had power losses on, and its own
    names for the rest: now both read the one table, and so does the pytest plugin."""
    assert options(command) == ExploreOptions()
    assert ExploreOptions() == ExploreOptions(repeat=1, budget_s=120.0, power_loss=True, jobs=None)
    assert options(command, *GIVEN) == ExploreOptions(repeat=3, budget_s=45.5, power_loss=False, jobs=2)
    assert options(command, "--power-loss").power_loss is True
    help_text = subcommand_help(command)
    for spec in SPECS:
        assert f"--{spec.name}" in help_text


def subcommand_help(command: str) -> str:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    chosen: argparse.ArgumentParser = commands.choices[command]
    return chosen.format_help()


@pytest.mark.parametrize(
    ("command", "old", "new", "notice"),
    [
        ("crashpoints", ["--max-points", "8"], ExploreOptions(), "--max-points is ignored: every distinct"),
        ("contract", ["--crash-max-points", "24"], ExploreOptions(), "--crash-max-points is ignored"),
        ("contract", ["--crash-repeat", "2"], ExploreOptions(repeat=2), "--crash-repeat is now --repeat"),
        ("contract", ["--crash-power-loss"], ExploreOptions(), "--crash-power-loss is now the default"),
    ],
)
def test_an_old_spelling_still_works_with_a_one_line_notice(
    command: str, old: list[str], new: ExploreOptions, notice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert options(command, *old) == new
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"mcp-chaos {command}: {notice}")


def test_the_new_spelling_wins_over_the_old() -> None:
    assert options("contract", "--crash-repeat", "2", "--repeat", "5").repeat == 5


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"repeat": "0"}, "--repeat '0': give the tries per crash state, an integer from 1 to 100"),
        ({"repeat": "two"}, "--repeat 'two': give the tries per crash state"),
        ({"budget_s": "-5"}, "--budget '-5': give the exploration's seconds, from 0"),
        ({"budget_s": "nan"}, "--budget 'nan': give the exploration's seconds"),
        ({"jobs": "1.5"}, "--jobs '1.5': give the number of copies of the target to explore in"),
    ],
)
def test_a_value_out_of_bounds_is_one_line_naming_its_option(given: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        read_options(given)
    assert refused.value.message.startswith(message)
    with pytest.raises(UsageError, match=r"^--mcp-chaos-"):  # as the pytest plugin spells it
        read_options(given, prefix="--mcp-chaos-")


def test_a_budget_of_nothing_is_an_exploration_that_lists_its_states() -> None:
    assert read_options({"budget_s": "0"}).budget_s == 0


def scenario_with(effects: dict[str, object]) -> object:
    data = invoice_scenario(mode="atomic")
    data["audit"] = {"effects": effects}
    if "sink" in effects:
        data["target"]["env"]["INVOICES_SINK_URL"] = "{sink_url}"
    return parse_scenario(data)


QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"


@pytest.mark.parametrize(
    ("effects", "store"),
    [
        ({"jsonl": {"path": "{data_dir}/notes.jsonl"}}, ["notes.jsonl"]),
        (
            {"sql": {"url": "sqlite:///{data_dir}/db/app.db", "query": QUERY}},
            ["db/app.db", "db/app.db-journal", "db/app.db-wal", "db/app.db-shm"],
        ),
        ({"files": {"dir": "{data_dir}", "pattern": "*.json"}}, ["*.json"]),
        ({"files": {"dir": "{data_dir}/notes", "pattern": "**/*"}}, ["notes/**/*"]),
        ({"sink": {}}, []),  # seen: its calls are points of their own
        ({"jsonl": {"path": "/var/lib/app/notes.jsonl"}}, None),  # outside the data directory
        ({"tool": {"tool": "count_invoices"}}, None),  # where it keeps them, the harness does not see
        ({"command": {"command": ["count"]}}, None),
    ],
)
def test_the_store_is_the_files_the_effect_source_reads_where_the_harness_sees_them(
    effects: dict[str, object], store: list[str] | None
) -> None:
    assert store_files(scenario_with(effects)) == store  # type: ignore[arg-type]
