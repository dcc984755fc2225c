"""The statistics behind ``dataflex compare``: exact values, and the error rates the docs state.

The docs (docs/compare.md, "How many seeds") state: equal arms are flagged
"higher"/"lower" at most 5% of the time at alpha = 0.05, and a real effect of
one standard deviation of the per-seed difference is found about 80% of the
time with 10 paired seeds. The simulations here check those claims; they are
seeded, so they give the same counts on every run.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dataflex_lab.compare import stats

ALPHA = 0.05
#: Binomial slack for a rate over TRIALS trials: three standard errors at the stated rate.
TRIALS = 2000


def slack(rate: float, trials: int) -> float:
    return 3 * math.sqrt(rate * (1 - rate) / trials)


def normal(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- exact values ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [
        # the two-sided 5% points of Student's t tables (p from scipy.stats.t.sf, the points being rounded)
        (12.7062, 1, 0.0500000185607104),
        (2.776445, 4, 0.05000000538209156),
        (2.228139, 10, 0.04999998745288254),
        (1.959964, 1e6, 0.05000027548810374),  # the normal limit
        (3.0, 2.5, 0.07257609554903183),  # non-integer df, as Welch's test produces
        (0.0, 3, 1.0),
    ],
)
def test_student_t_p_values_match_the_tables(t, df, p):
    assert stats.student_t_two_sided_p(t, df) == pytest.approx(p, rel=1e-9)
    assert stats.student_t_two_sided_p(-t, df) == pytest.approx(p, rel=1e-9)


@pytest.mark.parametrize(
    ("a", "b", "x", "expected"),  # reference values from scipy.special.betainc
    [
        (0.5, 0.5, 0.3, 0.36901011956554536),
        (2, 3, 0.4, 0.5248),
        (10, 0.5, 0.9, 0.15164090963470994),
        (30, 40, 0.45, 0.6447480085585666),
        (1, 1, 0.7, 0.7),
        (0.2, 5, 0.01, 0.5846698531754058),
    ],
)
def test_regularized_incomplete_beta_matches_reference_values(a, b, x, expected):
    assert stats.regularized_incomplete_beta(a, b, x) == pytest.approx(expected, rel=1e-12)


def brute_force_sign_flip_p(d: list[float]) -> float:
    observed = abs(sum(d))
    flips = [abs(sum(s * x for s, x in zip(signs, d))) for signs in itertools.product((1, -1), repeat=len(d))]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


@pytest.mark.parametrize("d", [[1.0, 2.0, 3.0], [0.3, -0.1, 0.5, 0.2, -0.05, 0.4], [1.0, -1.0], [0.0, 0.0, 0.0]])
def test_sign_flip_test_is_exact(d):
    result = stats.paired_permutation_test(d)
    assert result.p == pytest.approx(brute_force_sign_flip_p(d))
    assert result.min_p == 2 / 2 ** len(d)
    assert "exact" in result.method and f"{2 ** len(d)} sign patterns" in result.method


def test_three_paired_seeds_can_never_give_p_below_a_quarter():
    """The DataFlex-RL campaign's 3 seeds: even a difference of the same sign on every seed gives p = 0.25."""
    assert stats.paired_permutation_test([5.0, 6.0, 7.0]).p == 0.25


def test_unpaired_permutation_test_is_exact():
    a, b = [1.0, 2.0, 3.0, 4.5], [0.5, 1.0, 1.2]
    observed = abs(sum(a) / 4 - sum(b) / 3)
    pooled = a + b
    extreme = 0
    splits = list(itertools.combinations(range(7), 4))
    for chosen in splits:
        first = [pooled[i] for i in chosen]
        rest = [pooled[i] for i in range(7) if i not in chosen]
        extreme += abs(sum(first) / 4 - sum(rest) / 3) >= observed - 1e-12
    result = stats.unpaired_permutation_test(a, b)
    assert result.p == pytest.approx(extreme / len(splits)) and extreme / len(splits) == pytest.approx(5 / 35)
    assert result.min_p == pytest.approx(1 / 35)


def test_above_the_exact_limit_permutation_tests_are_monte_carlo_and_reproducible():
    d = normal((20,), seed=1) + 0.5
    first = stats.paired_permutation_test(d, max_exact=1024)
    assert "Monte-Carlo" in first.method
    assert first == stats.paired_permutation_test(d, max_exact=1024)
    assert first.p >= 1 / (stats.N_MONTE_CARLO + 1)
    exact = stats.paired_permutation_test(d)  # 2**20 > the default limit too
    assert exact.p == pytest.approx(first.p, abs=0.01)
    a, b = normal((12,), seed=2), normal((12,), seed=3)
    assert "Monte-Carlo" in stats.unpaired_permutation_test(a, b, max_exact=100).method


def test_t_tests_degenerate_spread():
    assert stats.paired_t_test([0.0, 0.0, 0.0]).p == 1.0
    assert stats.paired_t_test([0.5, 0.5, 0.5]).p == 0.0
    assert stats.welch_t_test([1.0, 1.0], [1.0, 1.0]).p == 1.0


def test_welch_t_test_matches_a_hand_computation():
    a, b = [1.0, 2.0, 3.0, 4.5], [0.5, 1.0, 1.2]
    va, vb = torch.tensor(a).var().item() / 4, torch.tensor(b).var().item() / 3
    t = (sum(a) / 4 - sum(b) / 3) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    result = stats.welch_t_test(a, b)
    assert result.p == pytest.approx(stats.student_t_two_sided_p(t, df))
    assert result.p == pytest.approx(0.10069309671455026, rel=1e-9)  # scipy.stats.ttest_ind(equal_var=False)


def test_holm_adjustment():
    assert stats.holm_adjusted([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert stats.holm_adjusted([0.3]) == [0.3]
    assert stats.holm_adjusted([0.6, 0.7]) == [1.0, 1.0]


def test_bootstrap_intervals_are_reproducible_and_per_column():
    x = normal((6, 4), seed=4)
    low, high = stats.bootstrap_mean_interval(x)
    for column in range(4):
        one = stats.bootstrap_mean_interval(x[:, column])
        assert one == pytest.approx((float(low[column]), float(high[column])))
        assert one[0] <= float(x[:, column].mean()) <= one[1]
    assert stats.bootstrap_mean_interval(x[:, 0], rng_seed=7) == stats.bootstrap_mean_interval(x[:, 0], rng_seed=7)
    paired = stats.bootstrap_difference_interval(x[:, 0], x[:, 1], paired=True)
    assert paired == stats.bootstrap_mean_interval(x[:, 0] - x[:, 1])
    low_u, high_u = stats.bootstrap_difference_interval(x[:, 0], x[:, 1], paired=False)
    assert low_u <= float(x[:, 0].mean() - x[:, 1].mean()) <= high_u


# -- error rates over many synthetic experiments ------------------------------------------------------------

TESTS = {
    "paired permutation": lambda a, b: stats.paired_permutation_test(a - b),
    "paired t": lambda a, b: stats.paired_t_test(a - b),
    "unpaired permutation": lambda a, b: stats.unpaired_permutation_test(a, b),
    "welch t": lambda a, b: stats.welch_t_test(a, b),
}


def rejection_rate(test, n_seeds: int, effect: float, seed: int, trials: int = TRIALS, shared_sd: float = 2.0) -> float:
    """How often ``test`` finds p < ALPHA when arm = baseline + effect, with a seed effect both arms share."""
    shared = normal((trials, n_seeds), seed) * shared_sd  # what a seed does to every arm (data order, init)
    # Each run's own noise has sd 1/sqrt(2), so one seed's difference has sd 1: effect is in those units.
    baseline = shared + normal((trials, n_seeds), seed + 1) / math.sqrt(2)
    arm = shared + normal((trials, n_seeds), seed + 2) / math.sqrt(2) + effect
    return sum(test(a, b).p < ALPHA for a, b in zip(arm, baseline)) / trials


@pytest.mark.parametrize("name", list(TESTS))
def test_equal_arms_are_flagged_at_no_more_than_alpha(name):
    # Unpaired tests are for seeds that share nothing: a shared seed effect would only make them more cautious.
    unpaired = "unpaired" in name or "welch" in name
    rate = rejection_rate(TESTS[name], 8 if unpaired else 10, effect=0.0, seed=100, shared_sd=0.0 if unpaired else 2.0)
    assert rate <= ALPHA + slack(ALPHA, TRIALS), f"{name}: equal arms flagged in {rate:.1%} of experiments"
    assert rate >= ALPHA / 3, f"{name}: {rate:.1%} is far below alpha; is the test working at all?"


@pytest.mark.parametrize(("name", "stated"), [("paired permutation", 0.79), ("paired t", 0.80)])
def test_a_real_effect_is_detected_at_the_stated_power(name, stated):
    """docs/compare.md: 10 paired seeds find an effect of 1 sd of the per-seed difference ~80% of the time."""
    rate = rejection_rate(TESTS[name], n_seeds=10, effect=1.0, seed=200)
    assert rate >= stated - slack(stated, TRIALS), f"{name}: the effect was found in only {rate:.1%}"


def test_pairing_is_what_finds_an_effect_under_a_large_shared_seed_effect():
    """With a seed effect twice the run noise, the unpaired test misses what the paired one finds."""
    paired = rejection_rate(TESTS["paired permutation"], 8, effect=1.5, seed=300, trials=300)
    unpaired = rejection_rate(TESTS["unpaired permutation"], 8, effect=1.5, seed=300, trials=300)
    assert paired > 0.8 and unpaired < 0.35, (paired, unpaired)


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("test", ["permutation", "t"])
def test_the_interval_is_the_tests_own_inversion(paired, test):
    """Each interval end is where the same test's p crosses 0.05: a shift just inside is kept, just outside is
    rejected; so 0 lies outside the interval exactly when p < 0.05 (60 cases of 8 seeds, exact tests)."""
    for trial in range(60):
        a, b = normal((8,), 2 * trial) + 0.1 * (trial % 12), normal((8,), 2 * trial + 1)
        result = stats.shift_test(a, b, paired=paired, test=test)
        low, high = result.ci
        assert (result.p < ALPHA) == (not low <= 0.0 <= high)
        if test == "permutation":
            old = stats.paired_permutation_test((a - b).tolist()) if paired else stats.unpaired_permutation_test(a, b)
            assert result.p == pytest.approx(old.p)  # the same test as before, now with its interval
        for end, inward in ((low, 1e-6), (high, -1e-6)):
            kept = stats.shift_test(a - (end + inward), b, paired=paired, test=test).p
            rejected = stats.shift_test(a - (end - inward), b, paired=paired, test=test).p
            assert kept >= ALPHA > rejected, (trial, end, kept, rejected)


def test_with_too_few_seeds_to_reject_anything_the_interval_is_unbounded():
    result = stats.shift_test([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], paired=True)
    assert result.p == 0.25 and result.ci == (-math.inf, math.inf)
