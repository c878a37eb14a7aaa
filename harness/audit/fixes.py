"""What each kind of finding means and how a server fixes it: one table, pure data; and the fix for a pod
that answers nothing after a fault, chosen from the evidence it left (:func:`unavailable_fix`).

Keyed by (verdict, cause). A cause here is either one of the auditor's causes or
a group of fault kinds that share a fix: ``pod_fault`` (the pod died: kill,
crash, rollout) and ``in_flight`` (the original was still running when its retry
came: a stream cut or held, a pause, a timeout, a balancer's re-send). Each fault
kind names its group, and brings the rows of its own, in its module
(:mod:`harness.faultkinds`: a duplicate by a balancer's re-send has one). A duplicate's fix depends on
whether the intent's key travelled with it, so duplicates have one row for a
workload without a key (``no_key``). The advice follows the source article and
the idempotency semantics of Stripe and the IETF draft (``Idempotency-Key``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.faultkinds.base import IN_FLIGHT, POD_FAULT, Fix
from harness.faultkinds.registry import KINDS
from harness.history import Verdict, excerpt

NO_KEY = "no_key"
ANY = "*"

GROUPS: dict[str, str] = {
    **{k.kind.value: k.group for k in KINDS},
    "timeout": IN_FLIGHT,
    "transport_error": IN_FLIGHT,
    "retryable_tool_error": IN_FLIGHT,
}
"""Causes that share a fix."""

FIXES: dict[tuple[str, str], Fix] = {
    (Verdict.DUPLICATE, NO_KEY): Fix(
        "a retry cannot be told from a new call: no idempotency key travels with the intent",
        "take an idempotency key (an argument, _meta or a header), keep key -> result, and answer a "
        "retry with the saved result",
    ),
    (Verdict.DUPLICATE, POD_FAULT): Fix(
        "the pod died between the effect and the key record: the retry found no record and did it again",
        "put the effect and the key record in one transaction (read-then-write with the key is not atomic)",
    ),
    (Verdict.DUPLICATE, IN_FLIGHT): Fix(
        "a retry arrived while the original was still running, and both ran",
        "a concurrent retry of an in-flight key must wait for the original or get 409 in-progress, "
        "not run again",
    ),
    **{(verdict, k.kind.value): fix for k in KINDS for verdict, fix in k.fixes.items()},
    (Verdict.DUPLICATE, "no_fault"): Fix(
        "the effect was counted twice though nothing was retried: the server repeats writes by itself, "
        "or the effect source counts one write twice",
        "count one such intent by hand (mcp-chaos explain RUN INTENT names its marker): if the store holds "
        "it once, the source reads a copy (a log, a backup, a journal beside the records) and must not; "
        "if twice, look for a double write in the handler (two inserts, a trigger, a retry inside the "
        "server) and compare with a control run (run --control)",
    ),
    (Verdict.LOST, "no_fault"): Fix(
        "the server acknowledged the write and kept nothing, with no fault at all: concurrent writes "
        "are lost (load-modify-save without a lock or transaction)",
        "serialise changes (one lock or one transaction around load-modify-save), or append instead "
        "of rewriting; a control run (run --control) shows it without faults",
    ),
    (Verdict.LOST, "vanished"): Fix(
        "effects the store held were gone after a pod restart: the store is not crash-safe",
        "write a temporary file, fsync it, rename it, fsync the directory; never start from empty on a "
        "parse error",
    ),
    (Verdict.LOST, "lost_across_restart"): Fix(
        "acknowledged, then the pod went down, and the effect was gone after the restart; no read saw "
        "it stored, and none before the fault showed it missing: the store did not keep it across the "
        "restart",
        "acknowledge only what is durable (commit, or fsync, rename and fsync the directory) and never "
        "start from empty on a store that does not parse; the checkpoint reads (audit.checkpoints) show "
        "when it went",
    ),
    (Verdict.LOST, "error_as_success"): Fix(
        "a failure was answered as a success: the reply reads as an error and nothing was stored",
        "answer a failure with isError: true and a machine-readable code, so a client can retry it",
    ),
    (Verdict.LOST, POD_FAULT): Fix(
        "acknowledged, then lost with the pod: the reply went out before the effect was durable",
        "answer only after the effect is committed (or fsynced); never acknowledge from memory",
    ),
    (Verdict.LOST, IN_FLIGHT): Fix(
        "acknowledged on a retry, yet no effect: the retry was answered from a record of an effect "
        "that never committed",
        "record the key only in the effect's transaction, so a replay always has an effect behind it",
    ),
    (Verdict.APPLIED_DESPITE_ERROR, "error_as_success"): Fix(
        "the server answered ok (isError false) with a text that says the call failed, and the effect "
        "happened: a model reads the text, and believes it failed",
        "answer a failure with isError true only when nothing was done; a retry of a call already done "
        "gets its original result, not an error",
    ),
    (Verdict.APPLIED_DESPITE_ERROR, ANY): Fix(
        "the server answered an error and the effect happened: the caller believes it failed",
        "a retry must get the original result, not an error ('already exists' teaches callers that "
        "retries are dangerous); an error must mean no effect",
    ),
    (Verdict.APPLIED_AFTER_GIVING_UP, ANY): Fix(
        "the effect landed after the client stopped retrying: the caller believes it failed",
        "let a later retry with the same key return the result (a key lifetime longer than any retry "
        "horizon), or give callers a way to ask for the outcome",
    ),
    (Verdict.UNFINISHED, ANY): Fix(
        "the client gave up and nothing happened: retries ran out before the server answered",
        "if the server recovers, raise client.max_attempts or attempt_timeout_s; if it does not, its "
        "restart is the finding (see the pod log)",
    ),
    (Verdict.REJECTED, ANY): Fix(
        "the server refused the call, cleanly (no effect)",
        "if most intents are refused, the workload's arguments or credentials are wrong (see the code "
        "and the error table)",
    ),
    (Verdict.INCOMPLETE, ANY): Fix(
        "the run stopped before the intent ended",
        "run the scenario to completion (a deadline, an interrupt or a harness failure ended it)",
    ),
}

INCONCLUSIVE = Fix(
    "the run did not test what it planned: a planned fault never happened, or most intents never took effect",
    "give the faults time to happen: more intents (workload.intents), faults.kill.hold_dispatch: true, "
    "or a lower min_uptime_s; a refused workload needs its arguments fixed first",
)


def fix_for(verdict: str, cause: str, *, keyed: bool = True) -> Fix | None:
    """The meaning and fix of one (verdict, cause) class; ``keyed``: whether the intents carried a key."""
    if verdict == Verdict.DUPLICATE and not keyed:
        return FIXES[(Verdict.DUPLICATE, NO_KEY)]
    for key in ((verdict, cause), (verdict, GROUPS.get(cause, cause)), (verdict, ANY)):
        if key in FIXES:
            return FIXES[key]
    return None


@dataclass(frozen=True, slots=True)
class Evidence:
    """A kind of evidence of why a pod answers nothing after a fault, how it shows, and its fix."""

    name: str
    """What it is, as the fix says it (``a parse error``)."""
    pattern: re.Pattern[str]
    """How the pod's log says it."""
    fix: str


UNAVAILABLE_EVIDENCE = (
    Evidence(
        "a port in use",
        re.compile(r"EADDRINUSE|address already in use|port \d+ is (already )?in use", re.IGNORECASE),
        "the restarted server could not listen, its port still held: let no child of the server outlive "
        "it holding the port, and listen with SO_REUSEADDR",
    ),
    Evidence(
        "a parse error",
        re.compile(
            r"JSONDecodeError|Extra data|Expecting (value|property name)|Unexpected (token|end of JSON)"
            r"|is not valid JSON|YAMLError|ScannerError|ParserError|could not parse|failed to parse"
            r"|parse error|malformed|file is not a database|corrupt",
            re.IGNORECASE,
        ),
        "its store did not parse after the fault: write it whole (a temporary file, fsync, rename, fsync "
        "the directory), never in place; and a start that finds it torn should say which file and "
        "recover from the last good copy",
    ),
    Evidence(
        "a migration",
        re.compile(r"migrat|schema version|alembic", re.IGNORECASE),
        "the restarted server stopped on its schema migration: make each migration one transaction (a "
        "kill leaves the old schema or the new) and let the next start finish one that was cut short",
    ),
    Evidence(
        "a lock file",
        re.compile(r"\block(ed|file)?\b", re.IGNORECASE),
        "remove stale locks at start-up (the process that held one is gone), or take locks that die with "
        "their process (flock, or a lock file with the holder's PID checked)",
    ),
)
"""What a pod that answers nothing after a fault may show, in the order a fix is chosen by: a log line
that says what stopped it first, a lock file (also from the data directory) last."""

UNAVAILABLE_UNKNOWN = (
    "(neither its log nor its data directory shows why: no lock file, parse error, port in use or "
    "migration): a person has to recover it; a server must come back from a kill on its own, so read its "
    "log for what it waits on"
)


def unavailable_fix(log: str, locks: Sequence[str] = (), unreadable: Sequence[str] = ()) -> str:
    """The fix for a pod that answers nothing after a fault, chosen from what its ``log`` (its last
    lines), its data directory's lock-like files (``locks``) and the store's files that do not parse
    (``unreadable``) show, and saying which: ``(its log shows a parse error: "..."): fix``."""
    lines = log.splitlines()[::-1]  # the last it said first: the error after its traceback
    for evidence in UNAVAILABLE_EVIDENCE:
        found = next((m[-1] for line in lines if (m := list(evidence.pattern.finditer(line)))), None)
        if found is not None:
            return f'(its log shows {evidence.name}: "{_around(found)}"): {evidence.fix}'
        if evidence.name == "a parse error" and unreadable:
            return (
                f"(its data directory shows {evidence.name}: {unreadable[0]} does not parse): {evidence.fix}"
            )
        if evidence.name == "a lock file" and locks:
            return f"(its data directory shows {evidence.name}: {', '.join(locks[:3])}): {evidence.fix}"
    return UNAVAILABLE_UNKNOWN


QUOTED = 120
"""Of the log line that shows the evidence, what the fix quotes (from a little before the match)."""


def _around(found: re.Match[str]) -> str:
    """The log line of ``found``, cut to ``QUOTED`` characters from a little before the match (a log kept
    as one line holds the traceback before the error that names it)."""
    line = found.string
    start = max(0, found.start() - QUOTED // 3)
    start = line.rfind(" ", 0, start) + 1 if start else 0  # at a word's start
    cut = line[start:].strip()
    quoted = excerpt(cut, QUOTED)
    return ("…" if start else "") + quoted
