"""Findings remembered between runs: saved after a run, replayed first by the next one.

A random run finds a rare window by luck, and the run after a fix may simply not
land there and pass. Hypothesis keeps a database of the examples that failed and
tries them before it generates new ones; this is the same for runs. After a run,
every finding a replay can make again (a pod kill caught it: :mod:`harness.replay`)
is saved in ``FOLDER/<scenario name>/`` as one JSON file per verdict and point
(``duplicate-db_commit-2.json``): where the kill caught it, the intents of the run
that showed it, and the scenario as that run ran it (the build a FIXED at a guessed
point is confirmed against). The next ``run`` of the same scenario replays each
first and says FIXED, STILL FAILING or COULD NOT REPRODUCE; a FIXED one is
forgotten, the others are kept. One still failing whose verdict the gate fails on
from its first intent fails the run (exit 1), whatever the run itself found.

The folder is plain files: commit it, as Hypothesis's users commit ``.hypothesis/``,
and a laptop replays what the nightly run found. Findings no pod kill made (a stream
fault, no fault at all) are not saved: a replay does not make them again.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import yaml

from harness import rundir
from harness.errors import ScenarioError, UsageError
from harness.replay import Finding, Replayed, Result, replay_findings, replay_scenario
from harness.report.junit import Case
from harness.sanitize import in_markdown
from harness.scenario import Scenario, parse_scenario

FORMAT = 1
"""The files' format (``"format"`` in each): a file of another is skipped with a warning, never guessed."""
DEFAULT_FOLDER = "findings"
"""The folder under ``--results`` where a run remembers its findings unless ``--findings`` names one."""
EXAMPLES = 10
"""Intents of the run that showed a finding kept in its file (to read their stories there)."""
TIMES = 3
"""Tries per remembered finding (``mcp-chaos replay``'s default)."""


@dataclass(slots=True)
class Remembered:
    """One finding a run saved: a verdict, the point a pod kill caught its attempts at, and that run."""

    scenario: str
    verdict: str
    point: str
    guessed: bool
    """No point of the attempt was observed: ``response`` is where the kill must have landed at the latest."""
    cause: str
    where: str
    run: str
    """The run that last showed it (its directory's name)."""
    found: str
    """When that run ended (UTC, ISO 8601)."""
    intents: list[int] = field(default_factory=list)
    runs: int = 1
    """How many runs have shown it."""
    scenario_yaml: str = ""
    """The scenario as that run ran it: the build a FIXED at a guessed point is confirmed against."""
    namespace: str = ""
    """That run's namespace: the replay's tries are made in it."""
    format: int = FORMAT

    @property
    def name(self) -> str:
        """The file's name (without ``.json``): the verdict and the point, which the folder keeps one of."""
        point = re.sub(r"[^A-Za-z0-9_]+", "-", self.point).strip("-")
        return f"{self.verdict}-{point}" + ("-guessed" if self.guessed else "")

    def finding(self) -> Finding:
        """As :mod:`harness.replay` replays it."""
        first = self.intents[0] if self.intents else 0
        return Finding(
            first, self.verdict, self.cause, self.point, self.where, self.guessed, self.namespace or None
        )

    def scenario_as_run(self) -> Scenario | None:
        """The scenario of the run that showed it, or None where it is not kept or no longer loads."""
        if not self.scenario_yaml:
            return None
        try:
            return parse_scenario(yaml.safe_load(self.scenario_yaml), source=f"the run {self.run}'s scenario")
        except (
            ScenarioError,
            yaml.YAMLError,
        ):  # an old scenario that no longer loads: nothing to confirm against
            return None


class Folder:
    """A scenario's remembered findings: ``root/<scenario name>/*.json``."""

    def __init__(self, root: Path, scenario: str) -> None:
        self.root = root
        self.path = root / re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario)
        self.scenario = scenario
        self.skipped: list[str] = []
        """Files that are not remembered findings of this format (named, not read)."""

    def load(self) -> list[Remembered]:
        """Every finding remembered for the scenario, in the order of their names."""
        if not self.path.is_dir():
            return []
        found = []
        for file in sorted(self.path.glob("*.json")):
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
                if data.get("format") != FORMAT:
                    raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
                found.append(Remembered(**data))
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                self.skipped.append(f"{file}: {exc}")
        return found

    def save(self, remembered: Remembered) -> Path:
        """Write one finding (a whole file, renamed into place: a reader never sees half of it)."""
        self.path.mkdir(parents=True, exist_ok=True)
        file = self.path / f"{remembered.name}.json"
        part = file.with_suffix(".json.part")
        part.write_text(json.dumps(asdict(remembered), indent=2) + "\n", encoding="utf-8")
        os.replace(part, file)
        return file

    def forget(self, remembered: Remembered) -> None:
        (self.path / f"{remembered.name}.json").unlink(missing_ok=True)

    def remember(self, run_dir: Path, scenario: Scenario, findings: Sequence[Finding]) -> list[Remembered]:
        """Save the findings of the run of ``scenario`` in ``run_dir`` a replay can make again, merged with
        those already remembered at the same verdict and point; what was saved."""
        known = {r.name: r for r in self.load()}
        made: dict[str, Remembered] = {}
        scenario_yaml = (run_dir / rundir.SCENARIO).read_text(encoding="utf-8")
        now = datetime.now(UTC).isoformat(timespec="seconds")
        for f in findings:
            # One lost by a fault on another call is replayed as two intents a try, which a file (a
            # verdict, a point and its intents) does not say: not remembered, as one no pod kill made.
            if f.point is None or f.wiped is not None or not replayable(scenario, f.point):
                continue
            new = Remembered(
                self.scenario, f.verdict, f.point, f.guessed, f.cause, f.where, run_dir.name, now, [f.intent]
            )
            new.scenario_yaml, new.namespace = scenario_yaml, f.namespace or ""
            if new.name in made:
                kept = made[new.name]
                if len(kept.intents) < EXAMPLES:
                    kept.intents.append(f.intent)
                continue
            old = known.get(new.name)
            if old is not None:
                new.runs = old.runs + (0 if old.run == run_dir.name else 1)
            made[new.name] = new
        for remembered in made.values():
            self.save(remembered)
        return list(made.values())


def replayable(scenario: Scenario, point: str) -> bool:
    """Whether a replay can kill the target at ``point`` (not one crash points cannot hold: replicas...)."""
    try:
        replay_scenario(scenario, point, TIMES)
    except ScenarioError:
        return False
    return True


def folder_for(findings: str | None, results: Path, scenario: Scenario) -> Folder:
    """``--findings`` (a directory, made if missing), else ``results/findings``."""
    root = Path(findings) if findings is not None else results / DEFAULT_FOLDER
    if root.exists() and not root.is_dir():
        raise UsageError(f"--findings {root}: not a directory (give the folder findings are remembered in)")
    return Folder(root, scenario.name)


def own_build(remembered: Sequence[Remembered], scenario_yaml: str) -> Scenario | None:
    """The scenario the findings were made with, where it is not the one run now (None: the same, or
    not known): what a FIXED at a guessed point must still fail against to stand."""
    for r in remembered:
        if r.scenario_yaml and r.scenario_yaml != scenario_yaml:
            return r.scenario_as_run()
    return None


@dataclass(frozen=True, slots=True)
class Told:
    """One remembered finding and what its replay before a run said."""

    remembered: Remembered
    replayed: Replayed

    @property
    def line(self) -> str:
        r, replayed = self.remembered, self.replayed
        seen = f"found by {r.run}" + (f" and {r.runs - 1} earlier run(s)" if r.runs > 1 else "")
        after = " (forgotten)" if replayed.result is Result.FIXED else ""
        return f"{r.verdict} {r.where} [{seen}]: {replayed.result.value}{after}: {replayed.why}"


def told(replays: Sequence[Replayed], remembered: Sequence[Remembered]) -> list[Told]:
    """Each replay beside the remembered finding it made again (by verdict and point)."""
    by_key = {(r.verdict, r.point, r.guessed): r for r in remembered}
    pairs = []
    for replayed in replays:
        r = by_key.get((replayed.verdict, replayed.point or "", replayed.guessed))
        if r is not None:
            pairs.append(Told(r, replayed))
    return pairs


def outcome(pairs: Sequence[Told], folder: Folder) -> list[Replayed]:
    """Forget what is FIXED; the replays still failing (the others are kept to try again next time)."""
    for t in pairs:
        if t.replayed.result is Result.FIXED:
            folder.forget(t.remembered)
    return [t.replayed for t in pairs if t.replayed.result is Result.STILL_FAILING]


def describe(pairs: Sequence[Told], folder: Folder) -> str:
    """A line per remembered finding: what it is, where it was found, and what its replay said."""
    return "\n".join([f"  {t.line}" for t in pairs] + [f"  skipped {s}" for s in folder.skipped])


def markdown(pairs: Sequence[Told], folder: Folder, failing: Sequence[Replayed]) -> str:
    """The section report.md and a CI job's summary page get: a run whose gate the replays failed says so
    where its reader looks, not only on the terminal."""
    verdict = (
        f"**The gate failed on {len(failing)} still failing.**" if failing else "None of them fails the gate."
    )
    rows = [f"- {in_markdown(t.line)}" for t in pairs] + [
        f"- skipped {in_markdown(s)}" for s in folder.skipped
    ]
    return (
        f"## Remembered findings, replayed before this run\n\nFrom `{folder.path}` ({TIMES} tries each). "
        f"{verdict}\n\n" + "\n".join(rows) + "\n"
    )


def cases(pairs: Sequence[Told], failing: Sequence[Replayed]) -> list[Case]:
    """A JUnit case per remembered finding (``remembered.duplicate@db_commit#2``): failed where it still
    fails and the gate fails on it, skipped where the replay could not say, passed where it is fixed or
    the gate does not judge it."""
    made = []
    for t in pairs:
        r, replayed = t.remembered, t.replayed
        name = f"remembered.{r.verdict}@{r.point}"
        if any(replayed is f for f in failing):
            made.append(Case(name, t.line))
        elif replayed.result is Result.COULD_NOT_REPRODUCE:
            made.append(Case(name, skipped=t.line))
        else:
            made.append(Case(name, details=t.line))
    return made


async def replay_remembered(
    folder: Folder, scenario: Scenario, run_dir: Path, *, out: TextIO | None = None
) -> tuple[list[Remembered], list[Replayed]]:
    """Replay every finding remembered for ``scenario`` against it (``TIMES`` tries each, their runs beside
    ``run_dir``), before the run in ``run_dir``; what was remembered and what each replay said."""
    remembered = folder.load()
    if not remembered:
        return remembered, []
    if out is not None:
        out.write(f"remembered findings ({folder.path}): {len(remembered)}, replayed before the run\n")
    own = own_build(remembered, (run_dir / rundir.SCENARIO).read_text(encoding="utf-8"))
    replays = await replay_findings(
        [r.finding() for r in remembered], scenario, times=TIMES, results=run_dir.parent, own=own, out=out
    )
    return remembered, replays
