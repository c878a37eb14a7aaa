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


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided p-value of Fisher's exact test: ``a`` of ``n1`` against ``b`` of ``n2``.

    Exact, because the counts compared here are small (37 against 1): the
    normal approximation of a two-proportion z-test is poor there. The p-value
    sums the probabilities of every table with the same margins that is at most
    as likely as the observed one (the usual two-sided definition, as in R and
    SciPy), with a relative tolerance for ties in floating point.
    """
    if not (0 <= a <= n1 and 0 <= b <= n2):
        raise ValueError(f"need 0 <= a <= n1 and 0 <= b <= n2, got {a}/{n1} and {b}/{n2}")
    events, total = a + b, n1 + n2
    if total == 0:
        return 1.0
    low, high = max(0, events - n2), min(events, n1)

    def log_p(x: int) -> float:
        return _log_choose(n1, x) + _log_choose(n2, events - x) - _log_choose(total, events)

    observed = log_p(a)
    p = sum(math.exp(log_p(x)) for x in range(low, high + 1) if log_p(x) <= observed + 1e-7)
    return min(1.0, p)


Z80 = 0.8416212335729143
"""The standard normal quantile for 80% power."""


def intents_to_tell_apart(p1: float, p2: float, z_alpha: float = Z95, z_beta: float = Z80) -> int | None:
    """Intents per design for a two-sided test at 5% to tell rates ``p1`` and ``p2`` apart with 80%
    power (the two-proportion formula); None when they are equal (no number of intents will)."""
    if p1 == p2:
        return None
    pooled = (p1 + p2) / 2
    numerator = z_alpha * math.sqrt(2 * pooled * (1 - pooled)) + z_beta * math.sqrt(
        p1 * (1 - p1) + p2 * (1 - p2)
    )
    return math.ceil(numerator**2 / (p1 - p2) ** 2)
