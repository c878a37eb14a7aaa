"""Synthetic histories, built event by event the way the driver, injector and supervisor write them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harness.audit.auditor import AuditResult, judge_fold
from harness.audit.fold import fold_history
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

    def finish(self, intent: int, status: str = "ok", attempts: int = 1) -> None:
        self.add("intent_ended", intent=intent, status=status, attempts=attempts)

    def run_intent(self, intent: int) -> None:
        """One intent that succeeds at its first attempt."""
        self.start(intent)
        rid = self.attempt(intent)
        self.tick()
        self.end(intent, rid)
        self.finish(intent)


def audit(h: History, effects: dict[str, int], scenario: Scenario) -> AuditResult:
    return judge_fold(fold_history([h.events]), Counter(effects), scenario, Path("run"))
