"""Which replica an attempt goes to: the harness as a health-checked load balancer.

A Kubernetes Service or a load balancer with health checks sends nothing to a
pod that is not ready; a retry after a failure is just another request to it,
so with ``round_robin`` it lands on the next replica. That is what makes a key
store kept in one process's memory double-bill: the retry of an attempt whose
answer was lost reaches a replica that never saw the key.

``sticky`` keeps an intent on one replica while that replica is ready (session
affinity); ``random`` draws from a seeded generator. When no replica is ready
the attempt goes to the one the policy names anyway: it fails as it would
behind a balancer with no healthy backend, and the driver retries.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Literal

from harness.client import McpClient

Policy = Literal["round_robin", "random", "sticky"]


class Balancer:
    """Picks a replica per attempt and hands out that replica's client for a worker."""

    def __init__(
        self,
        policy: Policy,
        clients: Sequence[Sequence[McpClient]],
        ready: Callable[[int], bool],
        *,
        seed: int,
    ) -> None:
        if not clients or not all(clients):
            raise ValueError("a balancer needs at least one client per replica")
        self.policy = policy
        self.clients = [list(c) for c in clients]
        """Per replica: one shared client, or one per worker (2025 sessions per worker)."""
        self.ready = ready
        self._rng = random.Random(f"{seed}:balance")
        self._next = 0

    @property
    def replicas(self) -> int:
        return len(self.clients)

    def pick(self, intent: int) -> int:
        """The replica for the next attempt of ``intent``."""
        n = self.replicas
        if self.policy == "sticky":
            start = intent % n
        elif self.policy == "random":
            start = self._rng.randrange(n)
        else:
            start = self._next
            self._next = (self._next + 1) % n
        for step in range(n):
            replica = (start + step) % n
            if self.ready(replica):
                if self.policy == "round_robin":
                    self._next = (replica + 1) % n
                return replica
        return start

    def client(self, replica: int, worker: int) -> McpClient:
        mine = self.clients[replica]
        return mine[worker % len(mine)]
