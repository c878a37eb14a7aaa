"""A run's history as a Jepsen history: the operations Jepsen's checkers read (``export --format jepsen``).

Jepsen (jepsen.io) records a test as operations: a client *process* invokes an
operation (``:invoke``) and later learns that it happened (``:ok``), certainly did
not (``:fail``), or cannot know (``:info``); the nemesis's faults are operations of
the process ``:nemesis``. The harness's history holds the same facts, so a user can
hand a run to Jepsen's checkers. The mapping, as docs/how-to/jepsen.md documents it:

* Each intent is one element of a set, its index; each attempt is an ``:add`` of
  that element: invoked at ``attempt_started``, completed at ``attempt_ended``
  with ``:ok`` (the tool's answer), ``:fail`` where the call certainly did not take
  effect as far as the client knows (a tool error, refused credentials, a session
  the server no longer knew, or a request that never reached a server), ``:info``
  otherwise (the exchange broke or timed out after the request was sent: the
  add may or may not have happened). Extra keys carry the tool, the intent, the
  attempt, the JSON-RPC id, the idempotency key and the outcome.
* A process does one operation at a time and, once one of its operations ends
  ``:info``, never another (Jepsen's convention for a crashed client): an
  attempt takes the lowest process free, and a process whose attempt ended
  ``:info`` is retired.
* Every ``fault`` (a kill, a pause, a stream fault) is a nemesis ``:info`` pair
  named by its kind, and a pod ready again after one is a nemesis ``:pod-ready``.
* The final read of the effect source is one ``:read`` at the end, whose value
  lists each intent's index as many times as its effect was found: Jepsen's
  ``set-full`` checker then reports an acknowledged add never read as *lost* and an
  element read more than once as *duplicated*, the harness's two findings. Where
  the effects could not be read (no audit yet, a store that could not be read),
  the read ends ``:info``.

Times are nanoseconds since the run started, as Jepsen's ``:time``. The output is
EDN, one operation per line (a Jepsen ``history.edn``).
"""

from __future__ import annotations

import csv
import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness import rundir
from harness.history import NEVER_SENT, EventType, Outcome, read_history

FAILED = frozenset({Outcome.TOOL_ERROR, Outcome.AUTH_ERROR, Outcome.SESSION_LOST})
"""Outcomes after which the client knows the call did not take effect (as far as a server says)."""


class Keyword(str):
    """An EDN keyword (``:ok``): written without quotes."""


NIL = None
"""EDN's nil."""


def edn(value: Any) -> str:
    """``value`` as EDN: maps, lists (vectors), strings, keywords, integers, floats, booleans, nil."""
    if value is None:
        return "nil"
    if isinstance(value, Keyword):
        return f":{value}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'
    if isinstance(value, Mapping):  # keys are keywords, as Jepsen's are
        return (
            "{" + ", ".join(f"{edn(_k(k) if type(k) is str else k)} {edn(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + " ".join(edn(v) for v in value) + "]"
    raise TypeError(f"no EDN form for {type(value).__name__}")


def _k(name: str) -> Keyword:
    return Keyword(name.replace("_", "-"))


@dataclass(frozen=True, slots=True)
class Exported:
    operations: int
    attempts: int
    faults: int
    read: bool
    """Whether the final read is ``:ok`` (the effects were known)."""


class _Processes:
    """Jepsen's processes: the lowest free one for each attempt; one whose attempt ended ``:info`` retires."""

    def __init__(self) -> None:
        self._free: list[int] = []
        self._next = 0
        self.busy: dict[tuple[int, int], int] = {}

    def take(self, attempt: tuple[int, int]) -> int:
        if self._free:
            process = heapq.heappop(self._free)
        else:
            process, self._next = self._next, self._next + 1
        self.busy[attempt] = process
        return process

    def end(self, attempt: tuple[int, int], *, crashed: bool) -> int | None:
        process = self.busy.pop(attempt, None)
        if process is not None and not crashed:
            heapq.heappush(self._free, process)
        return process

    def fresh(self) -> int:
        process, self._next = self._next, self._next + 1
        return process


def effects_read(run_dir: Path) -> dict[int, int] | None:
    """Each intent's effects as the audit counted them (``intents.csv``), or None where it could not
    (the run was not audited, or its effect source could not be read)."""
    path = run_dir / rundir.INTENTS_CSV
    if not path.is_file():
        return None
    effects: dict[int, int] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("effects") in (None, ""):
                return None
            effects[int(row["intent"])] = int(row["effects"])
    return effects


def completion(event: Mapping[str, Any]) -> Keyword:
    """``:ok``, ``:fail`` or ``:info`` for an attempt's end (see the module's docstring)."""
    outcome = event.get("outcome")
    if outcome == Outcome.OK:
        return Keyword("ok")
    if outcome in FAILED or event.get("detail") in NEVER_SENT:
        return Keyword("fail")
    return Keyword("info")


def operations(
    events: Iterable[Mapping[str, Any]], effects: Mapping[int, int] | None
) -> Iterator[dict[str, Any]]:
    """The Jepsen operations of a run's events, in order, without ``:index`` (see :func:`export`)."""
    processes = _Processes()
    markers: dict[int, str] = {}
    down: set[str] = set()
    last_ns = 0
    for event in events:
        kind = event.get("type")
        last_ns = time_ns = int(float(event.get("t", 0)) * 1e9)
        if kind == EventType.ATTEMPT_STARTED:
            attempt = (int(event["intent"]), int(event["attempt"]))
            yield {
                "type": Keyword("invoke"),
                "f": Keyword("add"),
                "value": attempt[0],
                "process": processes.take(attempt),
                "time": time_ns,
                **_about(event, markers),
            }
        elif kind == EventType.ATTEMPT_ENDED:
            attempt = (int(event["intent"]), int(event["attempt"]))
            done = completion(event)
            process = processes.end(attempt, crashed=done == "info")
            if process is None:
                continue  # an end without its start (a damaged history): nothing to complete
            op = {"type": done, "f": Keyword("add"), "value": attempt[0], "process": process, "time": time_ns}
            op.update(_about(event, markers))
            op["outcome"] = _k(str(event.get("outcome")))
            if done != "ok" and event.get("detail"):
                op["error"] = _k(str(event["detail"]))
            yield op
        elif kind == EventType.INTENT_STARTED:
            markers[int(event["intent"])] = str(event.get("marker", ""))
        elif kind == EventType.FAULT:
            what = {k: event[k] for k in ("pod", "intent", "attempt", "trigger") if k in event}
            name = _k(str(event.get("fault")))
            if "pod" in event:
                down.add(str(event["pod"]))
            yield from _nemesis(name, what or NIL, time_ns)
        elif kind == EventType.POD_READY and str(event.get("pod")) in down:
            down.discard(str(event["pod"]))
            yield from _nemesis(Keyword("pod-ready"), str(event["pod"]), time_ns)
    reader = processes.fresh()
    yield {"type": Keyword("invoke"), "f": Keyword("read"), "value": NIL, "process": reader, "time": last_ns}
    if effects is None:
        yield {
            "type": Keyword("info"),
            "f": Keyword("read"),
            "value": NIL,
            "process": reader,
            "time": last_ns,
            "error": Keyword("effects-unknown"),
        }
    else:
        read = [intent for intent, count in sorted(effects.items()) for _ in range(count)]
        yield {"type": Keyword("ok"), "f": Keyword("read"), "value": read, "process": reader, "time": last_ns}


def _nemesis(f: Keyword, value: Any, time_ns: int) -> Iterator[dict[str, Any]]:
    """A fault as the nemesis's pair of operations: both ``:info``, the invocation and its completion."""
    op = {"type": Keyword("info"), "f": f, "value": value, "process": Keyword("nemesis"), "time": time_ns}
    yield op
    yield dict(op)


def _about(event: Mapping[str, Any], markers: Mapping[int, str]) -> dict[str, Any]:
    """What an attempt's operation carries beyond Jepsen's keys."""
    intent = int(event["intent"])
    about: dict[str, Any] = {"intent": intent, "attempt": int(event["attempt"])}
    if markers.get(intent):
        about["marker"] = markers[intent]
    if "id" in event:
        about["request-id"] = event["id"]
    if event.get("key"):
        about["key"] = str(event["key"])
    return about


def export(run_dir: Path, out: IO[str]) -> Exported:
    """Write the run's Jepsen history to ``out``, one EDN operation a line."""
    effects = effects_read(run_dir)
    written = attempts = fault_ops = 0
    for index, op in enumerate(operations(read_history(run_dir / rundir.HISTORY), effects)):
        out.write(edn({"index": index, **op}) + "\n")
        written += 1
        if op["f"] == "add" and op["type"] == "invoke":
            attempts += 1
        elif op["process"] == "nemesis" and op["f"] != "pod-ready":
            fault_ops += 1
    return Exported(written, attempts, fault_ops // 2, read=effects is not None)
