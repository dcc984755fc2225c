"""Statistics over seeds: permutation and t tests with the intervals they invert to, bootstraps, Holm's adjustment.

Built on torch and the standard library, so ``dataflex-lab`` needs no
scipy. Every random draw comes from a ``torch.Generator`` seeded by
the caller, so the same runs always give the same report.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

CONFIDENCE = 0.95
N_BOOTSTRAP = 10_000
RNG_SEED = 0
#: Permutation tests enumerate every relabelling up to this many; above it they draw N_MONTE_CARLO at random.
MAX_EXACT_PERMUTATIONS = 2**16
N_MONTE_CARLO = 20_000
#: Ties between the observed statistic and a permuted one are decided up to this relative tolerance.
_TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class TestResult:
    """A two-sided p-value and the test that gave it.

    ``min_p`` is the smallest p-value the test can produce with these
    sample sizes: an exact permutation test on 3 paired seeds can never go
    below 0.25, whatever the data.
    """

    p: float
    method: str
    min_p: float


def as_values(values: Sequence[float] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float64)


@lru_cache(maxsize=64)
def bootstrap_counts(n: int, n_boot: int, rng_seed: int) -> torch.Tensor:
    """``(n_boot, n)``: how often each of ``n`` seeds is drawn in each resample (rows sum to ``n``).

    Cached: every arm and metric with ``n`` seeds is resampled with the same
    draws, which also makes each number independent of what else is compared.
    Callers must not modify the tensor.
    """
    generator = torch.Generator().manual_seed(rng_seed)
    draws = torch.randint(n, (n_boot, n), generator=generator)
    counts = torch.zeros(n_boot, n, dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones(n_boot, n, dtype=torch.float64))


def percentile_interval(samples: torch.Tensor, confidence: float) -> tuple[torch.Tensor, torch.Tensor]:
    tail = (1.0 - confidence) / 2.0
    q = torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
    low, high = torch.quantile(samples, q, dim=0)
    return low, high


def bootstrap_mean_interval(
    values: Sequence[float] | torch.Tensor,
    *,
    confidence: float = CONFIDENCE,
    n_boot: int = N_BOOTSTRAP,
    rng_seed: int = RNG_SEED,
) -> tuple[float, float] | tuple[torch.Tensor, torch.Tensor]:
    """Percentile bootstrap interval of the mean over seeds (dim 0).

    ``values`` of shape ``(n,)`` give two floats; shape ``(n, k)`` (seeds by
    steps, for the plot's bands) give two ``(k,)`` tensors, all columns
    resampled with the same seeds.
    """
    x = as_values(values)
    n = x.shape[0]
    means = bootstrap_counts(n, n_boot, rng_seed) @ x / n
    low, high = percentile_interval(means, confidence)
    return (float(low), float(high)) if x.dim() == 1 else (low, high)


def bootstrap_difference_interval(
    arm: Sequence[float],
    baseline: Sequence[float],
    *,
    paired: bool,
    confidence: float = CONFIDENCE,
    n_boot: int = N_BOOTSTRAP,
    rng_seed: int = RNG_SEED,
) -> tuple[float, float]:
    """Interval of ``mean(arm) - mean(baseline)``: seeds resampled together when paired, each arm on its own if not."""
    a, b = as_values(arm), as_values(baseline)
    if paired:
        return bootstrap_mean_interval(a - b, confidence=confidence, n_boot=n_boot, rng_seed=rng_seed)
    counts_a = bootstrap_counts(len(a), n_boot, rng_seed)
    counts_b = bootstrap_counts(len(b), n_boot, rng_seed + 1)
    diffs = counts_a @ a / len(a) - counts_b @ b / len(b)
    low, high = percentile_interval(diffs, confidence)
    return float(low), float(high)


# -- permutation tests -----------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _all_sign_patterns(n: int) -> torch.Tensor:
    bits = (torch.arange(2**n).unsqueeze(1) >> torch.arange(n)) & 1
    return (bits * 2 - 1).to(torch.float64)


@lru_cache(maxsize=32)
def _all_splits(n_total: int, n_first: int) -> torch.Tensor:
    chosen = torch.tensor(list(itertools.combinations(range(n_total), n_first)), dtype=torch.long)
    return torch.zeros(len(chosen), n_total, dtype=torch.float64).scatter_(1, chosen, 1.0)


def _p_value(stats: torch.Tensor, observed: float, scale: float, exact: bool) -> float:
    extreme = int((stats >= observed - _TIE_TOLERANCE * scale).sum())
    return extreme / len(stats) if exact else (extreme + 1) / (len(stats) + 1)


def paired_permutation_test(
    differences: Sequence[float], *, rng_seed: int = RNG_SEED, max_exact: int = MAX_EXACT_PERMUTATIONS
) -> TestResult:
    """Sign-flip test of "the per-seed differences are centred on zero", two-sided on their mean.

    Under the null, each seed's difference is as likely to have either sign;
    every pattern of signs is enumerated (``2**n``) when there are at most
    ``max_exact`` of them, else ``N_MONTE_CARLO`` random patterns are drawn.
    """
    d = as_values(differences)
    n = len(d)
    observed, scale = float(d.sum().abs()), float(d.abs().sum())
    if 2**n <= max_exact:
        stats = (_all_sign_patterns(n) @ d).abs()
        return TestResult(
            _p_value(stats, observed, scale, exact=True),
            f"exact sign-flip permutation test on the per-seed differences ({2**n} sign patterns)",
            2 / 2**n,
        )
    generator = torch.Generator().manual_seed(rng_seed)
    signs = torch.randint(2, (N_MONTE_CARLO, n), generator=generator).to(torch.float64) * 2 - 1
    return TestResult(
        _p_value((signs @ d).abs(), observed, scale, exact=False),
        f"Monte-Carlo sign-flip permutation test on the per-seed differences ({N_MONTE_CARLO} sign patterns)",
        1 / (N_MONTE_CARLO + 1),
    )


def unpaired_permutation_test(
    arm: Sequence[float],
    baseline: Sequence[float],
    *,
    rng_seed: int = RNG_SEED,
    max_exact: int = MAX_EXACT_PERMUTATIONS,
) -> TestResult:
    """Label-permutation test of "both arms' seeds come from one distribution", two-sided on the mean difference."""
    a, b = as_values(arm), as_values(baseline)
    pooled = torch.cat([a, b])
    n_a, n = len(a), len(pooled)
    total = float(pooled.sum())

    def mean_differences(masks: torch.Tensor) -> torch.Tensor:
        sum_a = masks @ pooled
        return (sum_a / n_a - (total - sum_a) / (n - n_a)).abs()

    observed = abs(float(a.mean() - b.mean()))
    scale = float(pooled.abs().mean()) * 2
    splits = math.comb(n, n_a)
    if splits <= max_exact:
        stats = mean_differences(_all_splits(n, n_a))
        return TestResult(
            _p_value(stats, observed, scale, exact=True),
            f"exact permutation test of the seeds' arm labels ({splits} relabellings)",
            (2 if n_a * 2 == n else 1) / splits,
        )
    generator = torch.Generator().manual_seed(rng_seed)
    order = torch.rand(N_MONTE_CARLO, n, generator=generator).argsort(dim=1)
    masks = torch.zeros(N_MONTE_CARLO, n, dtype=torch.float64).scatter_(1, order[:, :n_a], 1.0)
    return TestResult(
        _p_value(mean_differences(masks), observed, scale, exact=False),
        f"Monte-Carlo permutation test of the seeds' arm labels ({N_MONTE_CARLO} relabellings)",
        1 / (N_MONTE_CARLO + 1),
    )


# -- one test, its p and its interval ------------------------------------------------------------------


@dataclass(frozen=True)
class ShiftResult:
    """A test of "the arm's shift from the baseline is delta", read at every delta.

    ``estimate`` is the shift (the mean per-seed difference when paired, the difference of the means if not),
    ``p`` the test's two-sided p-value at delta = 0 and ``ci`` the deltas the same test does not reject at level
    ``1 - confidence``: so ``ci`` excludes 0 exactly when ``p < 1 - confidence``, by construction (a test and its
    inverted interval are one statement). An endpoint is infinite where no shift is rejected, as with too few
    seeds for the test to reach the level at all (``min_p``).
    """

    estimate: float
    ci: tuple[float, float]
    p: float
    method: str
    min_p: float
    paired: bool


def shift_test(
    arm: Sequence[float] | torch.Tensor,
    baseline: Sequence[float] | torch.Tensor,
    *,
    paired: bool,
    test: str = "permutation",
    confidence: float = CONFIDENCE,
    rng_seed: int = RNG_SEED,
    max_exact: int = MAX_EXACT_PERMUTATIONS,
) -> ShiftResult:
    """The p-value and the interval of one shift, from one test: ``permutation`` (sign flips of the per-seed
    differences when paired, relabellings of the seeds if not) or ``t`` (paired t / Welch)."""
    a, b = as_values(arm), as_values(baseline)
    if paired and len(a) != len(b):
        raise ValueError(f"paired values need one per seed on both sides, got {len(a)} and {len(b)}")
    if test == "t":
        return _t_shift(a, b, paired, confidence)
    if test != "permutation":
        raise ValueError(f"test {test!r} is not 'permutation' or 't'")
    if paired:
        d = a - b
        n = len(d)
        exact = 2**n <= max_exact
        if exact:
            signs = _all_sign_patterns(n)
            method = f"exact sign-flip permutation test on the per-seed differences ({2**n} sign patterns)"
        else:
            generator = torch.Generator().manual_seed(rng_seed)
            signs = torch.randint(2, (N_MONTE_CARLO, n), generator=generator).to(torch.float64) * 2 - 1
            method = (
                f"Monte-Carlo sign-flip permutation test on the per-seed differences ({N_MONTE_CARLO} sign patterns)"
            )
        # a pattern's statistic at shift delta: |mean(s * (d - delta))| = |a_s - delta * c_s|
        shift_a, shift_c, estimate = signs @ d / n, signs.sum(dim=1) / n, float(d.mean())
        min_p = 2 / 2**n if exact else 1 / (N_MONTE_CARLO + 1)
    else:
        pooled = torch.cat([a, b])
        n_a, n = len(a), len(pooled)
        splits = math.comb(n, n_a)
        exact = splits <= max_exact
        if exact:
            masks = _all_splits(n, n_a)
            method = f"exact permutation test of the seeds' arm labels ({splits} relabellings)"
        else:
            generator = torch.Generator().manual_seed(rng_seed)
            order = torch.rand(N_MONTE_CARLO, n, generator=generator).argsort(dim=1)
            masks = torch.zeros(N_MONTE_CARLO, n, dtype=torch.float64).scatter_(1, order[:, :n_a], 1.0)
            method = f"Monte-Carlo permutation test of the seeds' arm labels ({N_MONTE_CARLO} relabellings)"
        # a relabelling's mean difference at shift delta (the arm's values less delta): a_s - delta * c_s
        sum_a = masks @ pooled
        shift_a = sum_a / n_a - (float(pooled.sum()) - sum_a) / (n - n_a)
        moved = masks[:, :n_a].sum(dim=1)  # the arm's own seeds that stay in the arm's group
        shift_c = moved / n_a - (n_a - moved) / (n - n_a)
        estimate = float(a.mean() - b.mean())
        min_p = ((2 if n_a * 2 == n else 1) / splits) if exact else 1 / (N_MONTE_CARLO + 1)
    # ties between the observed statistic and a pattern's are decided up to a tolerance: in both p and ci
    tolerance = _TIE_TOLERANCE * max(1.0, float(torch.cat([a, b]).abs().max()))
    low, high = _acceptance_bounds(shift_a, shift_c, estimate)
    low, high = low - tolerance, high + tolerance
    p = _p_at(low, high, 0.0, exact)
    ci = _inverted_interval(low, high, 1.0 - confidence, exact)
    return ShiftResult(estimate, ci, p, method, min_p, paired)


def _acceptance_bounds(a: torch.Tensor, c: torch.Tensor, m: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pattern, the shifts at which it is at least as extreme as the observed: an interval ``[low, high]``.

    A pattern counts at shift delta when ``|a - delta c| >= |m - delta|``. Both sides are V-shaped in delta, the
    left with slope ``|c| <= 1``, so their difference only grows away from ``m``: the set is an interval around
    ``m``, bounded by the two crossings ``(a + m) / (1 + c)`` and ``(m - a) / (1 - c)`` (a pattern with
    ``|c| = 1``, the observed labelling or its mirror, counts at every shift). So ``p(delta)`` falls away from
    ``m`` on both sides and the deltas it keeps form one interval.
    """
    inf = torch.full_like(a, math.inf)
    first = torch.where(c > -1.0, (a + m) / (1.0 + c).clamp(min=1e-300), inf)
    second = torch.where(c < 1.0, (m - a) / (1.0 - c).clamp(min=1e-300), inf)
    whole = c.abs() >= 1.0 - 1e-12
    low = torch.where(whole, -inf, torch.minimum(first, second))
    high = torch.where(whole, inf, torch.maximum(first, second))
    return low, high


def _p_at(low: torch.Tensor, high: torch.Tensor, delta: float, exact: bool) -> float:
    counted = int(((low <= delta) & (delta <= high)).sum())
    return counted / len(low) if exact else (counted + 1) / (len(low) + 1)


def _inverted_interval(low: torch.Tensor, high: torch.Tensor, level: float, exact: bool) -> tuple[float, float]:
    """The shifts whose p is at least ``level``: p falls on each side, so the bound is the k-th widest crossing."""
    m = len(low)
    k = math.ceil(level * m - 1e-9) if exact else math.ceil(level * (m + 1) - 1 - 1e-9)
    if k <= 0:
        return -math.inf, math.inf
    if k > m:  # the level is above every p the test can give: no shift is kept but the estimate's own
        k = m
    upper = float(torch.topk(high, k).values[-1])
    lower = float(-torch.topk(-low, k).values[-1])
    return lower, upper


def _t_shift(a: torch.Tensor, b: torch.Tensor, paired: bool, confidence: float) -> ShiftResult:
    if paired:
        d = a - b
        n = len(d)
        estimate, se, df = float(d.mean()), float(d.std(unbiased=True)) / math.sqrt(n), float(n - 1)
        method = f"paired t test (df = {n - 1})"
    else:
        va, vb = float(a.var(unbiased=True)) / len(a), float(b.var(unbiased=True)) / len(b)
        se = math.sqrt(va + vb)
        denominator = va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)
        df = (va + vb) ** 2 / denominator if denominator > 0 else float(len(a) + len(b) - 2)
        estimate, method = float(a.mean() - b.mean()), f"Welch's t test (df = {df:.1f})"
    p = _t_p_value(estimate, se, df)
    half = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * se
    return ShiftResult(estimate, (estimate - half, estimate + half), p, method, 0.0, paired)


def student_t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (``q`` in [0.5, 1)) of Student's t: the ``t`` whose two-sided p is ``2 (1 - q)``."""
    target = 2.0 * (1.0 - q)
    low, high = 0.0, 1.0
    while student_t_two_sided_p(high, df) > target:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if student_t_two_sided_p(middle, df) > target:
            low = middle
        else:
            high = middle
    return high


def detectable_ratio(sd_log: float, n: int, alpha: float, power: float = 0.8) -> float:
    """The smallest fold change (``x`` or ``1/x``) a paired test of ``n`` log ratios spread ``sd_log`` detects with
    ``power`` at two-sided ``alpha``: ``exp((t(1 - alpha/2) + t(power)) sd_log / sqrt(n))``, ``n - 1`` degrees of
    freedom (the t approximation; ``inf`` below 2 pairs or without a spread)."""
    if n < 2 or not math.isfinite(sd_log):
        return math.inf
    df = n - 1
    return math.exp((student_t_quantile(1.0 - alpha / 2.0, df) + student_t_quantile(power, df)) * sd_log / math.sqrt(n))


# -- t tests ---------------------------------------------------------------------------------------------


def paired_t_test(differences: Sequence[float]) -> TestResult:
    """Student's t test of "the mean per-seed difference is zero" (assumes roughly normal differences)."""
    d = as_values(differences)
    n = len(d)
    mean, sd = float(d.mean()), float(d.std(unbiased=True))
    return TestResult(_t_p_value(mean, sd / math.sqrt(n), n - 1), f"paired t test (df = {n - 1})", 0.0)


def welch_t_test(arm: Sequence[float], baseline: Sequence[float]) -> TestResult:
    """Welch's t test of "the two arms have one mean" (unequal variances, roughly normal seeds)."""
    a, b = as_values(arm), as_values(baseline)
    va, vb = float(a.var(unbiased=True)) / len(a), float(b.var(unbiased=True)) / len(b)
    se = math.sqrt(va + vb)
    denominator = va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)
    df = (va + vb) ** 2 / denominator if denominator > 0 else float(len(a) + len(b) - 2)
    return TestResult(_t_p_value(float(a.mean() - b.mean()), se, df), f"Welch's t test (df = {df:.1f})", 0.0)


def _t_p_value(estimate: float, standard_error: float, df: float) -> float:
    if standard_error == 0.0:  # every seed gave the same difference
        return 1.0 if estimate == 0.0 else 0.0
    return student_t_two_sided_p(estimate / standard_error, df)


def student_t_two_sided_p(t: float, df: float) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom: ``I_x(df/2, 1/2)``, ``x = df/(df+t^2)``."""
    return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)``, from its continued fraction (evaluated where it converges fast, else by symmetry)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_prefactor = a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_prefactor) / (a * _beta_fraction(a, b, x))
    return 1.0 - math.exp(log_prefactor) / (b * _beta_fraction(b, a, 1.0 - x))


def _beta_fraction(a: float, b: float, x: float, tolerance: float = 1e-15, max_terms: int = 1000) -> float:
    """``1 + c1/(1 + c2/(1 + ...))`` with the incomplete beta function's coefficients, by Lentz's method.

    ``c(2m+1) = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1))`` and
    ``c(2m) = m (b-m) x / ((a+2m-1)(a+2m))``.
    """
    tiny = 1e-300

    def coefficient(k: int) -> float:
        m = k // 2
        if k % 2:
            return -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        return m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))

    value, numerator_ratio, denominator_ratio = 1.0, 1.0, 0.0
    for k in range(1, max_terms):
        c = coefficient(k)
        denominator_ratio = 1.0 + c * denominator_ratio
        denominator_ratio = 1.0 / (denominator_ratio if abs(denominator_ratio) > tiny else tiny)
        numerator_ratio = 1.0 + c / numerator_ratio
        numerator_ratio = numerator_ratio if abs(numerator_ratio) > tiny else tiny
        step = numerator_ratio * denominator_ratio
        value *= step
        if abs(step - 1.0) < tolerance:
            return value
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


# -- many comparisons ------------------------------------------------------------------------------------


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: keeps the chance of any false "separated" at most alpha across the family."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
