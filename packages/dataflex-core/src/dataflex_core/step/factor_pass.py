"""The token factor written in one pass, with the weight metrics' statistics taken from each block in cache.

The normalisation of ``(bs, L)`` weights (:func:`~dataflex_core.step.weights.finalize`) writes the factor,
``where(valid, w, 0) / mean``; the step then checks it finite and the weight metrics (:mod:`.metrics`) read
it again for its row sums, sum of squares, min and max over the valid tokens. On the CPU one numpy pass of
row blocks does all of it: each block of the factor is written, and while it is in cache it is copied into a
float64 buffer and reduced there, the same reductions of the same blocks the metrics pass makes, so the
statistics are the same bit for bit. They and the factor's finiteness are recorded for the factor
(:mod:`dataflex_core.tensor_facts`), where the metrics and the step's check find them.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch

from ..blockwise import chunk_map, flat_numpy
from ..tensor_facts import FINITE, ROW_STATS, remember

#: Elements per row block: a 2 MiB float64 buffer, held by the cache with its rows' mask.
STATS_BLOCK = 1 << 18

#: ``(row sums (bs,) float64, sum of squares, min, max)`` over valid tokens, the last three 0-dim float64.
RowStats = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def stats_rows(length: int) -> int:
    """Rows per block for rows of ``length`` tokens."""
    return max(1, STATS_BLOCK // max(1, length))


def numpy_2d(x: torch.Tensor) -> np.ndarray | None:
    """A contiguous 2-D CPU float/bool tensor as a numpy view, or None."""
    if x.dim() != 2 or x.dtype not in (torch.float32, torch.float64, torch.bool) or flat_numpy(x) is None:
        return None
    return x.numpy()


class BlockBuffers(threading.local):
    """One float64 row-block buffer per thread (:func:`~dataflex_core.blockwise.chunk_map` runs blocks on its
    threads)."""

    def __init__(self, rows: int, length: int) -> None:
        self.rows, self.length = rows, length
        self.value: np.ndarray | None = None

    def take(self, rows: int) -> np.ndarray:
        if self.value is None:
            self.value = np.empty((self.rows, self.length), dtype=np.float64)
        return self.value[:rows]


def block_stats(
    block: np.ndarray, valid: np.ndarray, row_sum: np.ndarray, high: float | None = None
) -> tuple[float, float, float]:
    """Row sums of a float64 ``block`` whose invalid tokens are 0 (into ``row_sum``), and its sum of squares,
    min and max over ``valid`` (``high``: the max, when the caller knows it)."""
    np.add.reduce(block, axis=1, out=row_sum)
    if high is None:
        high = float(np.maximum.reduce(block, axis=None, where=valid, initial=-np.inf))
    return (
        float(np.einsum("ij,ij->", block, block)),
        float(np.minimum.reduce(block, axis=None, where=valid, initial=np.inf)),
        high,
    )


def combined(row_sum: np.ndarray, blocks: list[tuple[float, float, float]]) -> RowStats:
    """The blocks' statistics in order: squares added in float64, the least min and the greatest max."""
    squares, low, high = 0.0, np.inf, -np.inf
    for block_squares, block_low, block_high in blocks:
        squares += block_squares
        low, high = min(low, block_low), max(high, block_high)
    return (
        torch.from_numpy(row_sum),
        torch.tensor(squares, dtype=torch.float64),
        torch.tensor(low, dtype=torch.float64),
        torch.tensor(high, dtype=torch.float64),
    )


def scaled_factor(weights: torch.Tensor, valid: torch.Tensor, denominator: float) -> torch.Tensor | None:
    """float32 ``where(valid, weights, 0) / denominator``, its statistics recorded; None off the CPU's numpy path.

    The division is float32's, by ``denominator`` rounded to float32, as ``Tensor.div_`` with a Python float
    divides a float32 tensor: the factor is the one the masked copy and ``div_`` give, bit for bit.

    :param weights: float32 ``(bs, L)``, finite and non-negative on ``valid`` (the contract checked them).
    :param valid: bool ``(bs, L)``.
    :param denominator: their mean over ``valid``, within float32's normal range.
    """
    if weights.dtype != torch.float32 or valid.dtype != torch.bool or weights.shape != valid.shape:
        return None
    ws, ms = numpy_2d(weights), numpy_2d(valid)
    if ws is None or ms is None:
        return None
    bs, length = ws.shape
    out = torch.empty((bs, length), dtype=torch.float32)
    os_ = out.numpy()
    scale = np.float32(denominator)
    row_sum = np.empty(bs, dtype=np.float64)
    step = stats_rows(length)
    buffers = BlockBuffers(min(step, bs), length)

    def write(rows: slice) -> tuple[float, float, float]:
        chunk, mask = os_[rows], ms[rows]
        chunk.fill(0)
        np.copyto(chunk, ws[rows], where=mask)
        np.divide(chunk, scale, out=chunk)
        block = buffers.take(rows.stop - rows.start)
        np.copyto(block, chunk)  # invalid tokens are 0 already: the metrics' masked float64 copy
        # The max over every token is the max over the valid ones: those are >= 0 and the greatest of them is
        # about 1 or more (a mean of one), where the invalid ones hold 0.
        return block_stats(block, mask, row_sum[rows], high=float(chunk.max()))

    stats = combined(row_sum, chunk_map(bs, write, step))
    remember(out, ROW_STATS, stats, valid=valid)
    if math.isfinite(float(stats[3])):  # the max of every token (NaN and inf included)
        remember(out, FINITE, True)
    return out
