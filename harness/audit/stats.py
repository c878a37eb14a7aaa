"""Statistics a reviewer can trust: every rate comes with its confidence interval."""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Chosen over the normal approximation because the rates this harness reports
    are small (0.05%, even 0): Wald's interval collapses to [0, 0] at zero
    events and dips below 0 near it, Wilson's stays inside [0, 1] and keeps a
    sensible width. ``n == 0`` gives the uninformative ``(0, 1)``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # Exact at the edges (the closed form can leave 1e-17 of rounding).
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class Rate:
    count: int
    n: int

    @property
    def value(self) -> float:
        return self.count / self.n if self.n else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.count, self.n)

    def as_dict(self) -> dict[str, object]:
        low, high = self.ci95
        return {"count": self.count, "n": self.n, "rate": self.value, "ci95": [low, high]}

    def describe(self) -> str:
        low, high = self.ci95
        return f"{self.count}/{self.n} = {self.value:.2%} (95% CI {low:.2%}–{high:.2%})"
