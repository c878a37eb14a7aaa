"""Synthetic histories, built event by event the way the driver, injector and supervisor write them."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from harness.audit.auditor import AuditResult, judge_fold
from harness.audit.fold import fold_history
from harness.history import SeenEffects
from harness.scenario import Scenario


class History:
    """Builds a history event by event, the way the driver and supervisor would."""

    def __init__(self, intents: int, **run: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0
        self.next_id = 1
        self.add("run_started", run_id="r", intents=intents, namespace="ns", **run)

    def add(self, type_: str, **fields: Any) -> None:
        self.events.append({"seq": len(self.events), "t": round(self.t, 6), "type": type_, **fields})

    def tick(self, dt: float = 0.01) -> None:
        self.t += dt

    def start(self, intent: int) -> None:
        self.add("intent_started", intent=intent, marker=f"ns-m{intent}", key=f"k{intent}")

    def attempt(self, intent: int, attempt: int = 1, pod: str | None = None) -> int:
        """An attempt; with ``pod``, sent to that replica (the driver names it when it balances)."""
        rid = self.next_id
        self.next_id += 1
        fields = {"pod": pod} if pod else {}
        self.add("attempt_started", intent=intent, attempt=attempt, id=rid, key=f"k{intent}", **fields)
        return rid

    def end(
        self,
        intent: int,
        rid: int,
        outcome: str = "ok",
        detail: str | None = None,
        attempt: int = 1,
        **fields: Any,
    ) -> None:
        if detail:
            fields["detail"] = detail
        self.add("attempt_ended", intent=intent, attempt=attempt, id=rid, outcome=outcome, **fields)

    def fault(self, kind: str, pod: str = "pod-0", **fields: Any) -> None:
        """A pod fault as the supervisor records it (the proxy's name a request id instead: use add)."""
        self.add("fault", fault=kind, pod=pod, pid=1, **fields)

    def exited(self, pod: str = "pod-0", returncode: int = -9) -> None:
        self.add("pod_exited", pod=pod, pid=1, returncode=returncode)

    def restarted(self, pod: str = "pod-0") -> None:
        self.add("pod_started", pod=pod, pid=2)
        self.add("pod_ready", pod=pod, pid=2, after_s=0.1, protocol="2026-07-28")

    def checkpoint(
        self,
        when: str,
        effects: dict[int, int],
        *,
        pod: str = "pod-0",
        error: str | None = None,
        foreign: int = 0,
    ) -> None:
        """A read of the effect source during the run: ``effects`` is intent -> effects it saw."""
        counts = {f"ns-m{i:07d}": n for i, n in effects.items()} | ({"elsewhere": foreign} if foreign else {})
        intents = max(effects, default=0) + 1
        seen = {} if error is not None else SeenEffects.of(counts, "ns", intents).fields()
        extra = {"error": error} if error is not None else {}
        fault_seq = len(self.events) - 1
        self.add("effects_checkpoint", when=when, pod=pod, fault_seq=fault_seq, took_s=0.01, **seen, **extra)

    def finish(self, intent: int, status: str = "ok", attempts: int = 1) -> None:
        self.add("intent_ended", intent=intent, status=status, attempts=attempts)

    def run_intent(self, intent: int) -> None:
        """One intent that succeeds at its first attempt."""
        self.start(intent)
        rid = self.attempt(intent)
        self.tick()
        self.end(intent, rid)
        self.finish(intent)


def audit(
    h: History, effects: dict[str, int], scenario: Scenario, run_dir: Path = Path("run")
) -> AuditResult:
    """The audit of a synthetic history (its stories read the same events again)."""
    return judge_fold(fold_history([h.events]), Counter(effects), scenario, run_dir, lambda: [h.events])


OUTCOMES = ("ok", "ok", "ok", "tool_error", "transport_error", "timeout", "protocol_error", "session_lost")
DETAILS = ("closed_before_response", "closed_mid_response", "gateway_error", "connect_refused", "no_response")


def random_history(seed: int, intents: int = 120, replicas: int = 1) -> History:
    """A seeded jumble of every event type the fold reads, in an order a run could write them.

    Not a realistic run: a history on which every branch of the fold is taken, for
    comparing two folds. Pods are killed (SIGKILL or gracefully, as kills or rollouts),
    paused and thawed, crash and restart; stream faults hit attempts in flight or none;
    sessions are opened and lost; errors carry messages; some intents never end, and
    the run may end or not.
    """
    rng = random.Random(seed)
    planned = intents if rng.random() < 0.8 else 0  # 0: an older history, the columns grow
    h = History(planned, faults_planned={"kill": rng.randint(0, 4)} if rng.random() < 0.8 else {})
    pods = [f"pod-{k}" for k in range(replicas)]
    frozen: set[str] = set()
    in_flight: dict[int, tuple[int, int]] = {}  # request id -> (intent, attempt)
    busy: set[int] = set()  # intents with an attempt in flight
    tries = [0] * intents
    open_intents: list[int] = []
    started = 0
    while started < intents or open_intents:
        h.tick(rng.choice((0.001, 0.01, 0.05, 0.3, 1.5)))
        roll = rng.random()
        if roll < 0.25 and started < intents:
            h.start(started)
            open_intents.append(started)
            started += 1
        elif roll < 0.45 and (idle := [i for i in open_intents if i not in busy]) and len(busy) < 6:
            i = rng.choice(idle)  # one attempt at a time per intent, a few intents at a time
            tries[i] += 1
            rid = h.attempt(i, tries[i], pod=rng.choice(pods) if replicas > 1 else None)
            in_flight[rid] = (i, tries[i])
            busy.add(i)
        elif roll < 0.7 and in_flight:
            rid = rng.choice(list(in_flight))
            i, attempt = in_flight.pop(rid)
            busy.discard(i)
            fields: dict[str, Any] = {}
            if rng.random() < 0.4:
                fields["message"] = rng.choice(("no invoice {}", "db locked after {} ms", "bad {}")).format(
                    rng.randint(0, 99)
                )
            if rng.random() < 0.2:
                fields["code"] = rng.choice((-32602, 500, "E_LOCK"))
            if rng.random() < 0.1:
                fields["resumed"] = rng.random() < 0.5
            outcome = rng.choice((*OUTCOMES, "protocol_error"))  # as long as before: the same histories
            if outcome == "ok" and rng.random() < 0.5:
                fields["reply"] = rng.choice(("Created note {}", "Database error: no such table {}")).format(
                    i
                )
                if fields["reply"].startswith("Database") and rng.random() < 0.9:
                    fields["reads_as_failure"] = True
            h.end(i, rid, outcome, rng.choice((*DETAILS, None)), attempt, **fields)
        elif roll < 0.8 and open_intents:
            i = rng.choice(open_intents)
            if i not in busy:
                open_intents.remove(i)
                if rng.random() < 0.95:  # else it never ends: the harness died before
                    h.finish(i, rng.choice(("ok", "ok", "gave_up", "rejected", "odd")), tries[i])
        elif roll < 0.86:
            pod = rng.choice(pods)
            what = rng.random()
            if what < 0.35:
                kind = rng.choice(("kill", "kill", "rollout"))
                graceful = {"signal": "SIGTERM", "grace_s": 1.0} if rng.random() < 0.4 else {}
                counted = {"counted": rng.random() < 0.5} if rng.random() < 0.3 else {}
                h.fault(kind, pod=pod, **graceful, **counted)
            elif what < 0.5 and pod not in frozen:
                h.fault("pause", pod=pod, duration_s=1.0)
                frozen.add(pod)
            elif what < 0.65 and pod in frozen:
                h.add("pod_resumed", pod=pod, pid=1)
                frozen.discard(pod)
            elif what < 0.85:
                h.exited(pod)  # the exit of a kill, or a crash
            else:
                h.restarted(pod)
        elif roll < 0.93:
            rule = rng.randint(0, 2)
            kind = rng.choice(("sever_response", "sever_request", "stall", "delay"))
            rid = rng.choice(list(in_flight)) if in_flight and rng.random() < 0.8 else 10_000 + rule
            done = {"server_done": rng.random() < 0.5} if kind == "sever_response" else {}
            h.add("fault", fault=kind, rule=rule, id=rid, **done)
        else:
            what = rng.random()
            if what < 0.4:
                h.add("session_opened", session="s", version="2025-11-25", client="c")
            elif what < 0.7:
                h.add("session_lost", session="s", status=404, client="c")
            elif what < 0.85:
                kind = rng.choice(("kill", "pause", "rollout"))
                h.add("fault_missed", fault=kind, trigger="t", counted=rng.random() < 0.5, reason="r")
            else:
                seen = {i: rng.choice((1, 1, 2)) for i in range(started) if rng.random() < 0.5}
                failed = "timed out" if rng.random() < 0.1 else None
                h.checkpoint(
                    rng.choice(("before_fault", "after_restart")),
                    seen,
                    error=failed,
                    foreign=rng.randint(0, 2),
                )
    if rng.random() < 0.2:  # the harness died here: attempts in flight, intents never ended
        del h.events[rng.randint(1, len(h.events)) :]
        return h
    if rng.random() < 0.5:
        h.add("effects_collected", error=rng.choice((None, "refused")))
    if rng.random() < 0.8:
        h.add("run_ended", status="completed")
    for _ in range(rng.randint(0, 3)):  # recorded after the run, from the balancer's log
        i = rng.randint(0, intents + 2)  # past the last intent too: counted, pinned on nothing
        h.add("balancer_retry", intent=i, attempt=1, id=1, upstreams=["pod-0", "pod-1"], statuses=[502, 200])
    return h
