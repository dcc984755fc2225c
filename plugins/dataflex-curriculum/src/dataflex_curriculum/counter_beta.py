"""Beta draws keyed by ``(seed, step, row)``: each prompt's draw computed for that prompt alone.

Thompson sampling draws every candidate's success rate from its Beta
posterior, and a prompt's draw must not depend on which other prompts are
candidates (the same seed gives the same curriculum however the candidates
fall). A sequential generator can promise that only by drawing for every
row of the dataset in order, O(dataset) per step. Here every uniform comes
from a counter-based hash (SplitMix64 of the key ``seed, step, row`` and a
counter), so the draw for row ``i`` is a function of ``(seed, step, i,
alpha_i, beta_i)``, computed in vectorised passes over the rows asked for
only: O(candidates).

``Beta(a, b) = X / (X + Y)`` with ``X ~ Gamma(a)``, ``Y ~ Gamma(b)``, each by
Marsaglia and Tsang's squeeze-free rejection (a normal by Box-Muller, one
uniform to accept; shapes below 1 boosted by ``U^(1/a)``); rejected rows
retry with the next counters, about 2-5 % of rows per round.
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
#: Counters per Gamma stream: 3 per rejection round, the boost uniform at the end.
_STREAM = 1024
_BOOST = 1000
_MAX_ROUNDS = 300


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def _uniform(keys: np.ndarray, counter: int) -> np.ndarray:
    """A uniform in (0, 1) per key for ``counter`` (float64, never 0 or 1)."""
    with np.errstate(over="ignore"):
        bits = _splitmix(keys + np.uint64(counter))
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def _gamma(shape: np.ndarray, keys: np.ndarray, stream: int) -> np.ndarray:
    boost = shape < 1.0
    a = np.where(boost, shape + 1.0, shape)
    d = a - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    out = np.empty_like(a)
    pending = np.arange(len(a))
    for round_ in range(_MAX_ROUNDS):
        if not len(pending):
            break
        base = stream * _STREAM + 3 * round_
        k = keys[pending]
        u1, u2, u3 = _uniform(k, base), _uniform(k, base + 1), _uniform(k, base + 2)
        x = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        dp, cp = d[pending], c[pending]
        t = 1.0 + cp * x
        v = t * t * t
        with np.errstate(invalid="ignore", divide="ignore"):
            accept = (t > 0) & (np.log(u3) < 0.5 * x * x + dp - dp * v + 3.0 * dp * np.log(np.abs(t)))
        out[pending[accept]] = dp[accept] * v[accept]
        pending = pending[~accept]
    out[pending] = d[pending]  # not reached in practice (each round accepts > 95 %)
    if boost.any():
        u = _uniform(keys[boost], stream * _STREAM + _BOOST)
        out[boost] *= u ** (1.0 / shape[boost])
    return out


def row_keys(seed: int, step: int, rows: np.ndarray) -> np.ndarray:
    """The hash key of each row's draws at ``(seed, step)`` (uint64)."""
    with np.errstate(over="ignore"):
        base = _splitmix(_splitmix(np.array([seed], dtype=np.uint64)) ^ np.array([step], dtype=np.uint64))
        return _splitmix(base ^ _splitmix(rows.astype(np.uint64)))


def beta_draws(alpha: torch.Tensor, beta: torch.Tensor, seed: int, step: int, rows: torch.Tensor) -> torch.Tensor:
    """One ``Beta(alpha_i, beta_i)`` draw per row (float64), a function of ``(seed, step, rows[i])`` and the
    shapes alone; shapes must be > 0."""
    keys = row_keys(int(seed), int(step), rows.to(torch.long).numpy())
    a, b = alpha.to(torch.float64).numpy(), beta.to(torch.float64).numpy()
    x, y = _gamma(a, keys, 0), _gamma(b, keys, 1)
    total = x + y
    with np.errstate(invalid="ignore"):
        out = np.where(total > 0, x / np.where(total > 0, total, 1.0), a / (a + b))
    return torch.from_numpy(out)
