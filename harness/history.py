"""The history: an append-only JSONL record of everything observed during a run.

It is the single source of truth for the auditor (Jepsen's model): client
operations and faults go into the same file, in the order they happened, each
with a sequence number and a monotonic timestamp in seconds since the run
started. Every event is written with one unbuffered ``write`` as it happens, so
a harness that dies mid-run loses nothing it had already observed, and a
partial history can still be audited.

Event types (fields beyond ``seq``, ``t``, ``type``):

=================  ==============================================================
run_started        run_id, scenario, seed, intents, namespace, started_at, version
intent_started     intent, marker, key
attempt_started    intent, attempt, id (JSON-RPC request id), key
attempt_ended      intent, attempt, id, outcome, detail, [status, form, result,
                   code, retryable]
intent_ended       intent, status (ok | gave_up | rejected), attempts
pod_started        pod, pid, [container]
pod_ready          pod, pid, after_s
pod_exited         pod, pid, returncode (the pod died during the run: killed or crashed)
pod_stopped        pod, pid, returncode (the harness stopped it at the end)
pod_resumed        pod, pid (the end of a pause fault)
effects_collected  markers (or null and error): the final read of a live effect source
service_started    service, pid, url (a service the harness runs for the target: postgres)
service_stopped    service, pid
fault              fault (kill, ...), pod, pid, [trigger]
run_ended          status (completed | interrupted | failed | deadline), [reason]
=================  ==============================================================
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from harness.errors import HistoryError

RUN_STARTED = "run_started"
INTENT_STARTED = "intent_started"
ATTEMPT_STARTED = "attempt_started"
ATTEMPT_ENDED = "attempt_ended"
INTENT_ENDED = "intent_ended"
POD_STARTED = "pod_started"
POD_READY = "pod_ready"
POD_EXITED = "pod_exited"
POD_STOPPED = "pod_stopped"
POD_RESUMED = "pod_resumed"
EFFECTS_COLLECTED = "effects_collected"
SERVICE_STARTED = "service_started"
SERVICE_STOPPED = "service_stopped"
FAULT = "fault"
RUN_ENDED = "run_ended"

Clock = Callable[[], float]


class HistoryWriter:
    """Appends events to ``history.jsonl``; one unbuffered write per event."""

    def __init__(self, path: Path, *, clock: Clock = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._t0 = clock()
        self._seq = 0
        self._file: BinaryIO | None = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()

    def now(self) -> float:
        """Seconds since the run started, on the history's clock."""
        return self._clock() - self._t0

    def emit(self, type_: str, **fields: Any) -> None:
        if self._file is None:
            raise HistoryError(f"history {self.path} is closed; no event can be added after run_ended")
        event = {"seq": self._seq, "t": round(self._clock() - self._t0, 6), "type": type_, **fields}
        self._seq += 1
        self._file.write(orjson.dumps(event) + b"\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the events of a history file in order, each checked to be an event object."""
    seq = 0
    for batch in read_batches(path):
        for event in batch:
            if type(event) is not dict or "type" not in event:
                raise HistoryError(f"{path}: event #{seq} is not an object with a 'type'")
            seq += 1
            yield event


def read_batches(path: Path) -> Iterator[list[Any]]:
    """Yield the parsed lines of a history file in order, 64 KiB of lines at a time.

    This is the audit's input: batches spare its fold a generator step per event
    (millions for a large run), and small ones keep the parsed events in cache
    (1 MiB batches were 30% slower). Lines are not checked to be event objects
    here; :func:`read_history` and the fold do that. A final line that is not
    valid JSON and lacks its newline is the trace of a harness killed mid-write
    and is skipped; any other unreadable line is a HistoryError naming it.
    """
    if not path.is_file():
        raise HistoryError(f"no history at {path} (is this a run directory made by `mcp-chaos run`?)")
    loads = orjson.loads
    first_line = 1
    with open(path, "rb") as f:
        while lines := f.readlines(1 << 16):
            try:
                batch = [loads(raw) for raw in lines]
            except orjson.JSONDecodeError:
                batch = _parse_carefully(path, lines, first_line)
            first_line += len(lines)
            yield batch


def _parse_carefully(path: Path, lines: list[bytes], first_line: int) -> list[Any]:
    """The slow path for a batch with a bad line: tolerate a torn last write, name any other."""
    events = []
    for offset, raw in enumerate(lines):
        try:
            events.append(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            if not raw.endswith(b"\n"):
                break  # torn last write
            raise HistoryError(f"{path}:{first_line + offset}: not a JSON event ({exc})") from None
    return events
