"""What a contract check is: its result, what it is given, what it leaves for others, and the registry.

A check is declared with :func:`check` on its function, in a module of its own
under :mod:`harness.contract.checks`, and registered as its module is imported
(as schemathesis registers its checks). What a check is told by the user
(``--crash-env``, ``--token-budget``, ...) is :class:`Options`; what the checks
saw along the way is :class:`Seen`. Two kinds of check read ``Seen``: a check that
*needs* others (``needs=``: ``annotations`` judges what ``replay`` and
``restart_keeps_keys`` did), which :func:`select` adds to any selection and which a
check refuses to judge without (an ``error`` result, never a verdict on an empty
``Seen``); and a *judge* (``judges=True``), which runs after every other check so it
reads all they saw. Light: it imports neither a check nor the session, so the
pure parts of ``harness.contract`` load without them.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import rundir
from harness.contract.judging import is_error
from harness.crashpoints.options import ExploreOptions
from harness.errors import AuditError, HarnessError, UsageError
from harness.history import Outcome, excerpt

if TYPE_CHECKING:
    from harness.client.messages import CallResult
    from harness.contract.session import ContractSession


class CheckVerdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not_applicable"
    ERROR = "error"
    """The check could not finish (the target would not come back, the harness broke, a check it needs
    did not run): no verdict."""


@dataclass(slots=True)
class CheckResult:
    id: str
    title: str
    verdict: CheckVerdict
    why: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Options:
    """What the user told the checks (the contract command's flags)."""

    crash_env: dict[str, str] = field(default_factory=dict)
    """Environment that makes the target crash between its effect and its key record (--crash-env)."""
    token_budget: int = 4000
    """Tokens (o200k_base) the whole catalog may cost every agent, every session (--token-budget)."""
    snapshot: Path | None = None
    """A catalog to compare with (written when missing): a changed description is a contract diff."""
    handle_wait_s: float = 5.0
    """How long the handles check waits for a handle to expire (--handle-wait)."""
    explore: ExploreOptions = field(default_factory=ExploreOptions)
    """How the crash_points check explores (--repeat, --budget, --power-loss, --jobs): as ``crashpoints``
    does, the same options with the same defaults."""


@dataclass(slots=True)
class Seen:
    """What the checks saw along the way, for the checks that judge it (errors, annotations)."""

    errors: list[tuple[str, CallResult]] = field(default_factory=list)
    empty_successes: list[tuple[str, CallResult]] = field(default_factory=list)
    """Successes after which the store held nothing for their intent."""
    successes: list[tuple[str, CallResult]] = field(default_factory=list)
    """Every success of an ordinary call (its intent's effects counted after), by the check that made
    it: an ok whose text reads as a failure is an error_contract finding, stored or not."""
    repeated: dict[str, int] = field(default_factory=dict)
    """Effects of one call made again (a retry, a replay after a restart), by the check that made it."""
    made_effects: bool = False
    finished: dict[str, CheckVerdict] = field(default_factory=dict)
    """The checks that ran so far, with their verdicts: what a check that needs them looks up."""

    def note(self, check: str, *results: CallResult) -> None:
        """Keep the errors among ``results`` for error_contract."""
        self.errors += [(check, res) for res in results if is_error(res)]

    def saw(self, check: str, results: Sequence[CallResult], effects: int) -> None:
        """Keep what ``results`` (the calls of one intent) say for the checks that judge it: their
        errors, whether they made effects, and their successes when the store held nothing."""
        self.note(check, *results)
        self.made_effects = self.made_effects or effects > 0
        oks = [(check, r) for r in results if r.outcome is Outcome.OK]
        self.successes += oks
        if effects == 0:
            self.empty_successes += oks


Promise = Callable[["Check", "ContractSession", Options, Seen], Awaitable[CheckResult]]


@dataclass(frozen=True, slots=True)
class Check:
    """One promise: its id and title, said once, and the function that checks it.

    The function gets the check itself and concludes with :meth:`passed`,
    :meth:`failed` or :meth:`not_applicable`, which fill in the id and title.
    Calling the check is the one place it runs: a check that raises is an
    ``error`` result with its reason, never the end of the contract run.
    """

    id: str
    title: str
    promise: Promise
    keyless: str | None = None
    """The title where no key travels, for a check that then judges plain repetition."""
    needs: tuple[str, ...] = ()
    """Checks whose observations this one judges: added to any selection, run before it."""
    judges: bool = False
    """It judges what every other check saw: it runs after all of them."""

    async def __call__(self, session: ContractSession, options: Options, seen: Seen) -> CheckResult:
        missing = [n for n in self.needs if seen.finished.get(n) in (None, CheckVerdict.ERROR)]
        if missing:
            result = self.unjudged(missing, seen)
        else:
            try:
                result = await self.promise(self, session, options, seen)
            except Exception as exc:  # a check's own failure is its result; cancellation goes through
                result = self.errored(exc, session)
        if not session.keyed and self.keyless is not None:
            result.title = self.keyless
        seen.finished[self.id] = result.verdict
        return result

    def passed(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.PASS, why, evidence or {})

    def failed(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.FAIL, why, evidence or {})

    def not_applicable(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.NOT_APPLICABLE, why, evidence or {})

    def unjudged(self, missing: Sequence[str], seen: Seen) -> CheckResult:
        """No verdict: what this check judges comes from checks that did not run, or did not finish."""
        why = ", ".join(f"{n} ({'could not finish' if n in seen.finished else 'not run'})" for n in missing)
        return CheckResult(
            self.id,
            self.title,
            CheckVerdict.ERROR,
            f"no verdict: it judges what {', '.join(self.needs)} saw, and {why}; run them with it "
            f"(--only {','.join([*self.needs, self.id])})",
            {"needs": list(self.needs)},
        )

    def errored(self, exc: Exception, session: ContractSession) -> CheckResult:
        what = exc.message if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, AuditError):  # the effect source failed: nothing it would have counted holds
            why = (
                f"the check could not finish: the effect source could not be read: {excerpt(what, 200)}; "
                "fix audit.effects (validate --preflight reads it), then run this check again "
                f"(--only {self.id})"
            )
        else:
            logs = session.run_dir / rundir.PODS
            why = (
                f"the check could not finish: {excerpt(what, 200)}; the target's log is in {logs}: fix what "
                f"stopped it, then run this check again (--only {self.id})"
            )
        return CheckResult(self.id, self.title, CheckVerdict.ERROR, why, {"error": type(exc).__name__})


REGISTRY: dict[str, Check] = {}
"""Every check, in the order its module registered it (:mod:`harness.contract.checks` imports them)."""


def check(
    id: str,
    title: str,
    *,
    keyless: str | None = None,
    needs: Sequence[str] = (),
    judges: bool = False,
) -> Callable[[Promise], Check]:
    """Declare and register a check: ``@check("replay", "the same key twice: ...")`` on its function;
    ``keyless`` is its title where no key travels; ``needs``, the checks whose observations it judges;
    ``judges``, whether it reads what every check saw (so runs last)."""

    def declare(promise: Promise) -> Check:
        if id in REGISTRY:
            raise ValueError(f"two checks named {id}")
        declared = Check(id, title, promise, keyless, tuple(needs), judges)
        REGISTRY[id] = declared
        return declared

    return declare


def in_order(checks: dict[str, Check]) -> list[str]:
    """The suite's order: the checks in registration order, each after those it needs, the judges last."""
    done: list[str] = []

    def place(cid: str, path: tuple[str, ...]) -> None:
        if cid in done:
            return
        if cid in path:
            raise ValueError(f"checks that need each other: {' -> '.join([*path, cid])}")
        for need in checks[cid].needs:
            place(need, (*path, cid))
        done.append(cid)

    for judges in (False, True):
        for cid, declared in checks.items():
            if declared.judges is judges:
                place(cid, ())
    return done


def choose(checks: dict[str, Check], only: Sequence[str], skip: Sequence[str]) -> list[str]:
    """The check ids to run, in suite order: ``only`` (all when empty) with what they need, less
    ``skip``; UsageError naming an unknown id. A needed check that is skipped leaves its judge
    without a verdict (an ``error`` result saying so), never judging an empty record."""
    unknown = sorted((set(only) | set(skip)) - set(checks))
    if unknown:
        raise UsageError(f"unknown check {', '.join(unknown)}; the checks are: {', '.join(checks)}")
    wanted: set[str] = set()
    pending = list(only or checks)
    while pending:
        cid = pending.pop()
        if cid not in wanted:
            wanted.add(cid)
            pending += checks[cid].needs
    return [c for c in in_order(checks) if c in wanted and c not in skip]
