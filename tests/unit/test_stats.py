"""The Wilson interval: known values, edge cases, and properties any interval must have."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.audit.stats import Z95, Rate, fisher_exact, intents_to_tell_apart, wilson_interval


def test_zero_events_upper_bound_is_closed_form() -> None:
    # With k = 0 the Wilson upper bound is z^2 / (n + z^2).
    low, high = wilson_interval(0, 2700)
    assert low == 0.0
    assert high == pytest.approx(Z95**2 / (2700 + Z95**2), rel=1e-12)


def test_article_naive_figure() -> None:
    # 37 of 2,700: the article's naive result. Reference values computed with the textbook formula.
    low, high = wilson_interval(37, 2700)
    assert low == pytest.approx(0.0099584, abs=1e-6)
    assert high == pytest.approx(0.0188308, abs=1e-6)


def test_all_events() -> None:
    assert wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(10, 10)[0] == pytest.approx(1 - Z95**2 / (10 + Z95**2))


def test_empty_sample_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("k", "n"), [(-1, 10), (11, 10), (0, -1)])
def test_rejects_impossible_counts(k: int, n: int) -> None:
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(k, n)


@given(st.integers(1, 100_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_interval_contains_estimate_and_stays_in_unit_range(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    # Symmetry: counting failures instead of successes mirrors the interval.
    mlow, mhigh = wilson_interval(n - k, n)
    assert math.isclose(low, 1 - mhigh, abs_tol=1e-12)
    assert math.isclose(high, 1 - mlow, abs_tol=1e-12)


@given(st.integers(1, 5000))
def test_interval_narrows_with_more_data(n: int) -> None:
    low1, high1 = wilson_interval(n // 10, n)
    low2, high2 = wilson_interval(n // 10 * 4, n * 4)
    assert high2 - low2 <= high1 - low1 + 1e-12


def test_rate_describes_itself() -> None:
    rate = Rate(1, 2108)
    assert rate.value == pytest.approx(1 / 2108)
    assert rate.as_dict()["ci95"] == list(rate.ci95)
    assert rate.describe().startswith("1/2108 = 0.05% (95% CI")


def test_fisher_exact_known_values() -> None:
    # SciPy's documented example, fisher_exact([[8, 2], [1, 5]]): p = 0.0349650...
    assert fisher_exact(8, 10, 1, 6) == pytest.approx(0.03496503496503495, rel=1e-12)
    # 3 of 3 against 0 of 3: the two most extreme tables of 20 equally likely splits each way.
    assert fisher_exact(3, 3, 0, 3) == pytest.approx(0.1, rel=1e-9)
    assert fisher_exact(0, 10, 0, 10) == 1.0
    # The article's naive against keyed (37 of 2,700 against 1 of 2,108): far beyond chance.
    assert fisher_exact(37, 2700, 1, 2108) < 1e-6


@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 60), st.integers(0, 60))
def test_fisher_exact_is_a_probability_and_symmetric(a: int, extra1: int, b: int, extra2: int) -> None:
    n1, n2 = a + extra1, b + extra2
    p = fisher_exact(a, n1, b, n2)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(fisher_exact(b, n2, a, n1), rel=1e-9)
    assert p == pytest.approx(fisher_exact(extra1, n1, extra2, n2), rel=1e-9)  # counting the others instead


def test_intents_to_tell_apart_known_values() -> None:
    assert (
        intents_to_tell_apart(0.5, 0.6) == 388
    )  # the textbook two-proportion example, no continuity correction
    assert intents_to_tell_apart(0.01, 0.01) is None


@given(st.floats(0.0, 0.4), st.floats(0.01, 0.5))
def test_a_larger_difference_needs_fewer_intents(p: float, gap: float) -> None:
    near = intents_to_tell_apart(p, p + gap / 2)
    far = intents_to_tell_apart(p, p + gap)
    assert near is not None
    assert far is not None
    assert far <= near


@given(st.integers(0, 500), st.integers(1, 500))
def test_wilson_bounds_grow_with_the_count(k: int, extra: int) -> None:
    n = k + extra
    low, high = wilson_interval(k, n)
    low2, high2 = wilson_interval(k + 1, n)
    assert 0.0 <= low <= high <= 1.0
    assert low2 >= low
    assert high2 >= high
