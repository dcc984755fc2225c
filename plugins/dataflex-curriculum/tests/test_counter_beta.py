"""Counter-keyed Beta draws: the Beta distribution (moments, a closed-form CDF), and each row's draw its own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dataflex_curriculum.counter_beta import beta_draws

N = 200_000


@pytest.mark.parametrize(("a", "b"), [(1.0, 1.0), (0.5, 0.5), (3.0, 7.0), (40.0, 2.0), (0.2, 5.0), (1.0, 200.0)])
def test_draws_have_the_beta_moments(a, b):
    rows = torch.arange(N)
    draws = beta_draws(torch.full((N,), a), torch.full((N,), b), 7, 3, rows).numpy()
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert ((draws >= 0) & (draws <= 1)).all()
    assert abs(draws.mean() - mean) < 5 * math.sqrt(var / N)
    # the variance of a sample variance is about (m4 - var^2) / N; 5 standard errors with m4 <= var (on [0, 1])
    assert abs(draws.var() - var) < 5 * math.sqrt(var / N)


@pytest.mark.parametrize(("a", "b", "cdf"), [(1.0, 1.0, lambda x: x), (2.0, 1.0, lambda x: x * x)])
def test_draws_pass_a_kolmogorov_smirnov_test_against_the_closed_form_cdf(a, b, cdf):
    draws = np.sort(beta_draws(torch.full((N,), a), torch.full((N,), b), 0, 1, torch.arange(N)).numpy())
    empirical = np.arange(1, N + 1) / N
    statistic = np.max(np.abs(empirical - cdf(draws)))
    assert statistic < 1.63 / math.sqrt(N)  # the 1 % critical value


def test_a_rows_draw_depends_on_seed_step_row_and_shape_only():
    alpha, beta = torch.tensor([1.0, 2.0, 3.0, 0.5]), torch.tensor([1.0, 5.0, 0.7, 9.0])
    rows = torch.tensor([0, 17, 999_999, 5])
    every = beta_draws(alpha, beta, 1, 4, rows)
    some = beta_draws(alpha[[2, 0]], beta[[2, 0]], 1, 4, rows[[2, 0]])
    assert some.tolist() == [every[2].item(), every[0].item()]
    assert torch.equal(beta_draws(alpha, beta, 1, 4, rows), every)
    assert not torch.equal(beta_draws(alpha, beta, 1, 5, rows), every)
    assert not torch.equal(beta_draws(alpha, beta, 2, 4, rows), every)


def test_neighbouring_rows_and_steps_are_uncorrelated():
    shape = torch.ones(N)
    here = beta_draws(shape, shape, 0, 1, torch.arange(N)).numpy()
    next_row = beta_draws(shape, shape, 0, 1, torch.arange(1, N + 1)).numpy()
    next_step = beta_draws(shape, shape, 0, 2, torch.arange(N)).numpy()
    for other in (next_row, next_step):
        assert abs(np.corrcoef(here, other)[0, 1]) < 5 / math.sqrt(N)
