"""What a finding at a hold point says about the server, in its own statements, and what to change.

The auditor's fix for a (verdict, cause) class (:mod:`harness.audit.fixes`) is
general: a duplicate after a kill means the effect and the key record are not
one transaction. An exploration knows more: which commit the crash came after,
what that commit wrote, which commit came next, whether a downstream call
carried a key. This module says the finding in those terms, in the words of the
source article; ``crashpoints``'s reports and the contract's ``crash_points``
check show it beside the class's fix. Plain text that quotes the server
(excerpts of its statements and keys): each output sanitizes it for itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.crashpoints.explore import Exploration, PointResult
from harness.crashpoints.points import FILE_KINDS, Crash, Point, PointKind
from harness.history import Verdict
from harness.sanitize import bounded

STATEMENT_LIMIT = 160
"""How much of a statement the advice quotes: enough to see the table and the columns."""


def _quoted(statements: Sequence[object]) -> str:
    """Statements a commit made durable, quoted: the server's text, cut to an excerpt; each output
    escapes it for itself."""
    return "; ".join(repr(bounded(str(w), STATEMENT_LIMIT)) for w in statements)


def _held(exploration: Exploration, result: PointResult) -> Mapping[str, Any]:
    """What the try a finding is told by was held at (its last hold): the statements of that very
    commit, which may sit at another index than the clean call's."""
    holds = result.held.get(result.example(exploration.run_of(result).verdicts)) or []
    return holds[-1].detail if holds else exploration.details.get(result.path[-1].name, {})


def _later(exploration: Exploration, point: Point) -> list[Point]:
    """The clean call's points of the same kind after ``point`` (found by what it commits), but for
    commits that only read."""
    at = next((i for i, p in enumerate(exploration.clean) if point.same(p)), None)
    if at is None:
        return []
    return [
        p
        for p in exploration.clean[at + 1 :]
        if p.kind is point.kind and exploration.details.get(p.name, {}).get("wrote") != "no"
    ]


def _writes(exploration: Exploration, point: Point) -> str:
    """The statements of a commit of the clean call, quoted."""
    return _quoted(exploration.details.get(point.name, {}).get("statements") or [])


DURABLE_FIX = (
    "Write the new state to a temporary file, fsync it, rename it over the old one and fsync the "
    "directory; at start-up never read a file that does not parse as empty (refuse to start)"
)


def _durability(exploration: Exploration) -> str:
    """What the clean call's file operations leave undone, said as the reason a power loss loses."""
    ops = [p for p in exploration.clean if p.kind in FILE_KINDS]
    synced_dir = [i for i, p in enumerate(ops) if p.kind is PointKind.FS_FSYNC and p.label in (".", "")]
    journals = [
        i for i, p in enumerate(ops) if p.kind is PointKind.FS_UNLINK and (p.label or "").endswith("-journal")
    ]
    if journals and not any(i > journals[-1] for i in synced_dir):
        return (
            "it commits by deleting its rollback journal and does not fsync the directory after (SQLite's "
            "synchronous=FULL in rollback-journal mode): after a power loss the journal is back, hot, and "
            "rolls the last commit back. Use PRAGMA synchronous=EXTRA, or journal_mode=WAL with "
            "synchronous=FULL"
        )
    wal = any((p.label or "").endswith("-wal") for p in ops)
    if wal and not any(p.kind is PointKind.FS_FSYNC and (p.label or "").endswith("-wal") for p in ops):
        return (
            "it commits to SQLite's write-ahead log without an fsync of it (journal_mode=WAL with "
            "synchronous=NORMAL or OFF): a commit is durable only at the next checkpoint, and a power loss "
            "before that rolls it back. Use PRAGMA synchronous=FULL"
        )
    if not any(p.kind is PointKind.FS_FSYNC for p in ops):
        return (
            "it never fsyncs what it writes, so nothing it wrote since the last time the directory was "
            f"durable survives a power loss. {DURABLE_FIX}"
        )
    for i, p in enumerate(ops):
        if p.kind is not PointKind.FS_RENAME or not p.label:
            continue
        source, _, target = p.label.partition(" -> ")
        if not any(q.kind is PointKind.FS_FSYNC and q.label == source for q in ops[:i]):
            return (
                f"it renames {source} over {target} without fsync of {source} first: after a power loss "
                f"{target} may hold none of the new bytes. {DURABLE_FIX}"
            )
        if not any(j > i for j in synced_dir):
            return (
                f"it renames {source} over {target} and does not fsync the directory after, so the rename "
                f"is not durable: a power loss brings back the old {target}. {DURABLE_FIX}"
            )
    return (
        "what it acknowledged was not all durable when it answered (a file written after its last fsync, "
        f"or a name made without its directory's fsync). {DURABLE_FIX}"
    )


def _file_advice(exploration: Exploration, result: PointResult) -> str | None:
    """What a loss at a file operation or after a power loss says about how the server writes its files."""
    point = result.path[-1]
    wiped = sum(len(v) for v in result.wiped.values())
    intents = "1 intent" if wiped == 1 else f"{wiped} intents"
    earlier = f" and {intents} acknowledged before it {'was' if wiped == 1 else 'were'} lost" if wiped else ""
    if point.crash is Crash.POWER_LOSS:
        lost = earlier or " the call was lost"
        return f"After a power loss at {point.operation}{lost}: {_durability(exploration)}."
    if point.kind in FILE_KINDS:
        label = point.label or "its file"
        return (
            f"A crash at {point.name} ({label}) left the store half written{earlier}: the server read what "
            f"the crash left as its whole state. {DURABLE_FIX}."
        )
    if wiped:
        return f"A crash at {point.name} lost {intents} acknowledged before it. {DURABLE_FIX}."
    return None


def advice(exploration: Exploration, result: PointResult) -> str:
    """What the finding at ``result``'s point says about the target, and what to change there."""
    finding = result.finding
    point = result.path[-1]
    if finding is Verdict.LOST and (told := _file_advice(exploration, result)) is not None:
        return told
    held = _held(exploration, result)
    here = _quoted(held.get("statements") or [])
    later = _later(exploration, point)
    if finding is Verdict.DUPLICATE:
        if len(result.path) == 2:
            return (
                f"A crash during the recovery from a crash at {result.path[0].name} repeats the effect: the "
                f"retry's own work is not one atomic step either. Make the first call's work atomic (the fix "
                f"for {result.path[0].name}, if it has a finding) and the retry finds it done."
            )
        if point.kind is PointKind.DB_COMMIT and later:
            return (
                f"{point.name} committed the effect ({here or 'a write'}), and what "
                f"tells a retry it was done committed later, on its own ({later[0].name}: "
                f"{_writes(exploration, later[0]) or 'a write'}). A crash between the two commits leaves the "
                "effect without its record, and the retry makes it again: read-then-write idempotency is not "
                "atomic. Put the business write and the idempotency record in one transaction (a unique key; "
                "a retry that finds it replays the stored result)."
            )
        if point.kind is PointKind.DB_COMMIT:
            return (
                f"{point.name} is the effect ({here or 'a write'}), and nothing "
                "records the intent's key with it: every retry of a call that got this far makes it again. "
                "Store the key with the effect, in the same transaction, unique, and replay the stored "
                "result for a key seen before."
            )
        if point.kind is PointKind.DOWNSTREAM:
            key = held.get("key")
            why = (
                "its call carried no idempotency key, so it could not tell the retry's call from a new one"
                if key is None
                else "it got the intent's key but does not deduplicate by it (a provider that does "
                "answers the retry as a replay; the effect sink does so with "
                "audit.effects.sink.dedupe_by_key: true)"
            )
            return (
                f"The downstream recorded the call at {point.name} and the retry called it again; {why}. "
                "Forward the intent's key downstream (an Idempotency-Key header) to a provider that "
                "deduplicates by it, or record the downstream call in your store before making it and look "
                "it up on a retry."
            )
        return (
            f"The call had finished at {point.name} and its retry did the work again: the server does not "
            "recognise a retry. Store the intent's key with the effect, in one transaction, and replay the "
            "stored result for a key seen before."
        )
    if finding is Verdict.LOST:
        if point.kind is PointKind.DB_COMMIT and later:
            return (
                f"{point.name} made the record that the intent is done durable "
                f"({here or 'a write'}) before the effect itself committed "
                f"({later[0].name}: {_writes(exploration, later[0]) or 'a write'}). A crash between them "
                "leaves a key that replays a result nothing created: the client is told it succeeded. "
                "Write the key record in the same transaction as the effect."
            )
        return (
            f"After a crash at {point.name} the client was told the call succeeded, and no effect exists: "
            "something that marks the intent done was made durable before the effect. Make both durable "
            "together."
        )
    if finding is Verdict.APPLIED_DESPITE_ERROR:
        return (
            f"After a crash at {point.name} the retry was refused with an error though the effect exists. "
            "Replay the stored result for a key seen before, rather than refuse it."
        )
    return ""
