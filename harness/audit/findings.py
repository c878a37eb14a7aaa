"""The headline: the worst finding of a run first, in one sentence, then the others.

Severity order: ``unavailable`` (a pod back from a fault that answered no call:
it needs a person, and the run stopped on it), ``store_unreadable`` (a file of the
store that does not parse as its server reads it: the server cannot read its store
again), ``lost`` (acknowledged, and gone),
``applied_despite_error`` (refused, and done), ``duplicate`` (done twice), then an
inconclusive run (it did not test what it planned). A run with none of them is "exactly once: N of N".
Every renderer prints :attr:`Summary.headline` first, so a report can never say
"duplicates: 0" above a run that lost half of its writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.audit.stats import Rate
from harness.history import Verdict

SEVERITY = (Verdict.LOST, Verdict.APPLIED_DESPITE_ERROR, Verdict.DUPLICATE)
"""Findings about the server, worst first; an inconclusive run comes after them."""
INCONCLUSIVE = "inconclusive"
UNAVAILABLE = "unavailable"
STORE_UNREADABLE = "store_unreadable"
STORE_UNREADABLE_FIX = (
    "write the store whole to a temporary file, fsync it, rename it over the old one and fsync the "
    "directory, never in place (a rewrite in place that a crash cuts before its truncate leaves a whole "
    "document followed by the tail of an older, longer one); and a start that finds it torn should say "
    "which file and recover from the last good copy"
)
EXACTLY_ONCE = Verdict.EXACTLY_ONCE.value

WHAT = {
    Verdict.LOST: "acknowledged, and no effect in the store",
    Verdict.APPLIED_DESPITE_ERROR: "the server answered an error (or an ok saying it failed) and the effect "
    "happened",
    Verdict.DUPLICATE: "the effect happened more than once",
}
SHOWN_CAUSES = 4


def _pct(x: float) -> str:
    return f"{x:.2%}"


def _rate(rate: Rate) -> str:
    low, high = rate.ci95
    return f"{rate.count} of {rate.n} intents = {_pct(rate.value)} (95% CI {_pct(low)}–{_pct(high)})"


def _causes(causes: Mapping[str, int]) -> str:
    ranked = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{cause} {n}" for cause, n in ranked[:SHOWN_CAUSES])
    rest = sum(n for _, n in ranked[SHOWN_CAUSES:])
    return text + (f", other {rest}" if rest else "")


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding of a run: what, how many, how sure, and why (its causes)."""

    kind: str
    """``unavailable``, ``store_unreadable``, ``lost``, ``applied_despite_error``, ``duplicate``,
    ``inconclusive`` or ``exactly_once``."""
    count: int
    rate: Rate
    causes: dict[str, int]
    """Cause -> intents (empty for inconclusive and exactly_once)."""
    sentence: str

    @property
    def severe(self) -> bool:
        """A finding about the server or the run, not the all-clear."""
        return self.kind != EXACTLY_ONCE


def findings(
    verdicts: Mapping[Verdict, int],
    rates: Mapping[Verdict, Rate],
    causes: Mapping[Verdict, Mapping[str, int]],
    inconclusive: Sequence[str],
    context: str,
    *,
    unavailable: Sequence[str] = (),
    unavailable_fix: str = "",
    unreadable: Sequence[str] = (),
    not_started: int = 0,
    story: str | None = None,
) -> list[Finding]:
    """Every finding of a run, worst first; the all-clear when there is none.

    ``context`` (``with 8 kills, 8 pod exits``) ends the first sentence, as it tells what
    the counts were measured under. ``unavailable``: a sentence per pod found so, first of all, and
    ``unavailable_fix`` its fix (chosen from its evidence, :func:`harness.audit.fixes.unavailable_fix`);
    ``unreadable``: a sentence per file of the store that does not parse;
    ``not_started``: the intents the run did not start (it stopped on it). ``story``: what the store
    became after a fault, when a read showed it empty or unreadable; it opens the lost finding, before
    the counts and causes it explains (:mod:`harness.audit.emptied`).
    """
    found: list[Finding] = []
    started = rates[Verdict.EXACTLY_ONCE].n
    if unavailable:
        stopped = f"; the run stopped: {not_started} intents not started" if not_started else ""
        found.append(
            Finding(
                UNAVAILABLE,
                len(unavailable),
                Rate(0, started),
                {},
                "UNAVAILABLE: " + "; ".join(unavailable) + stopped + f". Fix {unavailable_fix}",
            )
        )
    if unreadable:
        found.append(
            Finding(
                STORE_UNREADABLE,
                len(unreadable),
                Rate(0, started),
                {},
                "STORE UNREADABLE: " + "; ".join(unreadable) + f". Fix: {STORE_UNREADABLE_FIX}",
            )
        )
    for verdict in SEVERITY:
        count = verdicts.get(verdict, 0)
        if count:
            why = dict(causes.get(verdict, {}))
            sentence = f"{verdict.value.upper().replace('_', ' ')}: {_rate(rates[verdict])}: {WHAT[verdict]}"
            if verdict is Verdict.LOST and story is not None:
                sentence = f"LOST: {story}. {_rate(rates[verdict])}: {WHAT[verdict]}"
            found.append(
                Finding(verdict.value, count, rates[verdict], why, sentence + f"; causes: {_causes(why)}")
            )
    if inconclusive:
        found.append(
            Finding(
                INCONCLUSIVE,
                len(inconclusive),
                Rate(0, started),
                {},
                "INCONCLUSIVE: " + "; ".join(inconclusive),
            )
        )
    if not found:
        once = rates[Verdict.EXACTLY_ONCE]
        others = ", ".join(
            f"{n} {v.value}" for v, n in verdicts.items() if n and v is not Verdict.EXACTLY_ONCE
        )
        sentence = f"exactly once: {once.count} of {started} intents" + (f" ({others})" if others else "")
        found.append(Finding(EXACTLY_ONCE, once.count, once, {}, sentence))
    first = found[0]
    if context:
        found[0] = Finding(first.kind, first.count, first.rate, first.causes, f"{first.sentence}; {context}")
    return found


def also(finding: Finding) -> str:
    """A finding after the headline, shorter: ``also: 13 duplicate ...``."""
    if finding.kind in (INCONCLUSIVE, UNAVAILABLE, STORE_UNREADABLE):
        return "also: " + finding.sentence
    return f"also: {finding.kind}: {_rate(finding.rate)}; causes: {_causes(finding.causes)}"
