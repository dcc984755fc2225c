"""Counter-keyed Beta draws: the Beta distribution at every shape and by every rule (moments, Kolmogorov-Smirnov
and chi-square tests against the Beta CDF, fixed seeds: deterministic), and each row's draw its own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dataflex_curriculum import counter_beta
from dataflex_curriculum.counter_beta import beta_draws

N = 200_000
#: Shapes through every rule: the prior's one uniform, the inverse CDFs (Beta(a, 1), Beta(1, b), shapes below 1
#: among them), the gamma ratio (both shapes above 1, one or both boosted below 1, tiny, large, lopsided).
SHAPES = [(1.0, 1.0), (3.0, 1.0), (1.0, 17.0), (0.3, 1.0), (1.0, 0.4), (0.5, 0.5), (3.0, 7.0), (40.0, 2.0),
          (0.2, 5.0), (1.0001, 200.0), (0.05, 0.05), (300.0, 500.0), (2.5, 0.7)]  # fmt: skip


def beta_cdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """The regularized incomplete beta ``I_x(a, b)``: its continued fraction (evaluated by the modified Lentz
    method) on the side of the mean where it converges fast, ``1 - I_{1-x}(b, a)`` on the other."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    lower = x < (a + 1.0) / (a + b + 2.0)
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    for side, (p, q, z) in ((lower, (a, b, x)), (~lower, (b, a, 1.0 - x))):
        if not side.any():
            continue
        zs = np.clip(z[side], 1e-300, 1.0)
        front = np.exp(p * np.log(zs) + q * np.log1p(-np.minimum(zs, 1.0 - 1e-16)) - log_beta) / p
        value = front * _continued_fraction(zs, p, q)
        out[side] = value if side is lower else 1.0 - value
    return np.clip(out, 0.0, 1.0)


def _continued_fraction(x: np.ndarray, a: float, b: float) -> np.ndarray:
    tiny = 1e-300

    def guard(v):
        return np.where(np.abs(v) < tiny, tiny, v)

    c = np.ones_like(x)
    d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
    h = d.copy()
    for m in range(1, 3000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1.0 / guard(1.0 + numerator * d)
            c = guard(1.0 + numerator / c)
            h *= d * c
        if np.max(np.abs(d * c - 1.0)) < 1e-15:
            break
    return h


def beta_quantiles(levels: list[float], a: float, b: float) -> np.ndarray:
    """``I^-1``: bisection on the logit of ``x`` (resolves quantiles far below float64's spacing near 0)."""
    low, high = np.full(len(levels), -800.0), np.full(len(levels), 40.0)
    for _ in range(90):
        mid = 0.5 * (low + high)
        below = beta_cdf(1.0 / (1.0 + np.exp(-mid)), a, b) < np.asarray(levels)
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    return 1.0 / (1.0 + np.exp(-0.5 * (low + high)))


def draws(a: float, b: float, n: int = N, seed: int = 7, step: int = 3) -> np.ndarray:
    return beta_draws(torch.full((n,), a), torch.full((n,), b), seed, step, torch.arange(n)).numpy()


def test_the_test_cdf_is_the_beta_cdf():
    x = np.linspace(0.0, 1.0, 101)
    assert np.allclose(beta_cdf(x, 1.0, 1.0), x, atol=1e-12)
    assert np.allclose(beta_cdf(x, 2.0, 1.0), x * x, atol=1e-12)
    assert np.allclose(beta_cdf(x, 1.0, 3.0), 1.0 - (1.0 - x) ** 3, atol=1e-12)
    # Beta(3, 4): P(Binomial(6, x) >= 3)
    binomial = sum(math.comb(6, k) * x**k * (1.0 - x) ** (6 - k) for k in range(3, 7))
    assert np.allclose(beta_cdf(x, 3.0, 4.0), binomial, atol=1e-12)
    assert np.allclose(beta_cdf(x, 0.5, 0.5), 2.0 / math.pi * np.arcsin(np.sqrt(x)), atol=1e-10)


@pytest.mark.parametrize(("a", "b"), SHAPES)
def test_draws_have_the_beta_moments(a, b):
    sample = draws(a, b)
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert ((sample >= 0) & (sample <= 1)).all()
    assert abs(sample.mean() - mean) < 5 * math.sqrt(var / N)
    # the variance of a sample variance is about (m4 - var^2) / N; 5 standard errors with m4 <= var (on [0, 1])
    assert abs(sample.var() - var) < 5 * math.sqrt(var / N)


#: Where float64 resolves a draw: nearer 1 than this, draws of tiny shapes round to 1.0 (ties the CDF never has).
RESOLVED = 1.0 - 1e-12


@pytest.mark.parametrize(("a", "b"), SHAPES)
def test_draws_pass_a_kolmogorov_smirnov_test_against_the_beta_cdf(a, b):
    sample = np.sort(draws(a, b))
    inside = sample < RESOLVED
    cdf = beta_cdf(sample[inside], a, b)
    above, below = np.arange(1, N + 1)[inside] / N, np.arange(N)[inside] / N  # F_n at and just before each draw
    beyond = abs(inside.mean() - beta_cdf(np.array([RESOLVED]), a, b)[0])  # the draws rounded to 1.0, as a block
    statistic = max(np.max(above - cdf), np.max(cdf - below), beyond)
    assert statistic < 1.95 / math.sqrt(N), statistic  # the 0.1 % critical value


@pytest.mark.parametrize(("a", "b"), SHAPES)
def test_draws_pass_a_chi_square_test_in_the_tails(a, b):
    """Kolmogorov-Smirnov barely sees the tails: bins at the 0.1, 1 and 5 % quantiles on each side, deciles
    between (quantiles float64 cannot resolve merged into their neighbours)."""
    levels = [0.001, 0.01, 0.05, *np.arange(0.1, 0.91, 0.1), 0.95, 0.99, 0.999]
    quantiles = beta_quantiles(levels, a, b)
    kept = [(q, x) for q, x in zip(levels, quantiles) if 1e-300 < x < RESOLVED]
    edges = np.array([0.0, *(x for _, x in kept), 1.0])
    expected = np.diff([0.0, *(q for q, _ in kept), 1.0]) * N
    observed = np.histogram(draws(a, b, seed=11, step=5), bins=edges)[0]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    dof = len(expected) - 1
    critical = dof * (1 - 2 / (9 * dof) + 3.09 * math.sqrt(2 / (9 * dof))) ** 3  # 0.1 % (Wilson-Hilferty)
    assert dof >= 10 and statistic < critical, (statistic, critical, dof)


def test_tiny_shapes_stay_in_the_unit_interval_without_nan():
    sample = draws(0.01, 0.02, n=50_000)
    assert np.isfinite(sample).all() and ((sample >= 0) & (sample <= 1)).all()
    # nearly all mass at the ends, in proportion b / (a + b) near 0
    assert abs((sample < 0.5).mean() - 2 / 3) < 0.02


def test_a_rows_draw_depends_on_seed_step_row_and_shape_only():
    alpha, beta = torch.tensor([1.0, 2.0, 3.0, 0.5, 1.0]), torch.tensor([1.0, 5.0, 0.7, 9.0, 4.0])
    rows = torch.tensor([0, 17, 999_999, 5, 42])
    every = beta_draws(alpha, beta, 1, 4, rows)
    some = beta_draws(alpha[[2, 0, 4]], beta[[2, 0, 4]], 1, 4, rows[[2, 0, 4]])
    assert some.tolist() == [every[2].item(), every[0].item(), every[4].item()]
    assert torch.equal(beta_draws(alpha, beta, 1, 4, rows), every)
    assert not torch.equal(beta_draws(alpha, beta, 1, 5, rows), every)
    assert not torch.equal(beta_draws(alpha, beta, 2, 4, rows), every)


def test_a_rows_draw_is_the_same_in_any_chunk_order_and_thread_count():
    """Every rule, rows across several chunks, rejected rows redrawn after them: a candidate's draw equals its
    draw over the whole dataset, whatever the other rows, their order or torch's threads."""
    n = 3 * counter_beta._CHUNK + 1234
    generator = torch.Generator().manual_seed(0)
    rule = torch.randint(0, 4, (n,), generator=generator)
    shape = 0.2 + 6 * torch.rand(2, n, generator=generator, dtype=torch.float64)
    alpha = torch.where(rule == 0, 1.0, torch.where(rule == 1, 1.0, shape[0]))
    beta = torch.where(rule == 0, 1.0, torch.where(rule == 2, 1.0, shape[1]))
    every = beta_draws(alpha, beta, 5, 9, torch.arange(n))
    picked = torch.randperm(n, generator=generator)[:5000]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        some = beta_draws(alpha[picked], beta[picked], 5, 9, picked)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(some, every[picked])


def test_neighbouring_rows_steps_and_seeds_are_uncorrelated():
    n = N // 2
    for a, b in ((1.0, 1.0), (3.0, 7.0)):
        here = draws(a, b, n, seed=0, step=1)
        next_row = beta_draws(torch.full((n,), a), torch.full((n,), b), 0, 1, torch.arange(1, n + 1)).numpy()
        for other in (next_row, draws(a, b, n, seed=0, step=2), draws(a, b, n, seed=1, step=1)):
            assert abs(np.corrcoef(here, other)[0, 1]) < 5 / math.sqrt(n)
