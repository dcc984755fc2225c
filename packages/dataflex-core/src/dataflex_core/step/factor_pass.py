"""The factor's division by its mean, with the weight metrics' statistics taken from each block in cache.

The normalisation of ``(bs, L)`` weights (:func:`~dataflex_core.step.weights.finalize`) divides its masked
copy of the weights by their mean; the step then checks the factor finite and the weight metrics
(:mod:`.metrics`) read it again for its row sums, sum of squares, min and max over the valid tokens. On the CPU
one numpy pass of row blocks does all of it: each block is divided in place, and while it is in cache it is
copied into a float64 buffer and reduced there, the same reductions of the same blocks the metrics pass makes,
so the statistics are the same bit for bit. They and the factor's finiteness are recorded for the factor
(:mod:`dataflex_core.tensor_facts`), where the metrics and the step's check find them. (Reading the factor is
cheap once it is written; what the metrics pass cost was the float64 work per block, done here once.)
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

#: float32's smallest normal and largest finite value: the range ``Tensor.div_`` divides in float32.
_FLOAT32 = torch.finfo(torch.float32)
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


def divide_with_stats(factor: torch.Tensor, valid: torch.Tensor, denominator: float) -> torch.Tensor | None:
    """``factor /= denominator`` in place, its statistics recorded; None (and ``factor`` untouched) off the CPU's
    numpy path or where the division is not float32's.

    The division is float32's, by ``denominator`` rounded to float32, as ``Tensor.div_`` with a Python float
    divides a float32 tensor: the factor is the one ``div_`` gives, bit for bit.

    :param factor: float32 ``(bs, L)``, our own, 0 outside ``valid`` and finite, non-negative on it.
    :param valid: bool ``(bs, L)``.
    :param denominator: its mean in the loss unit, within float32's normal range.
    """
    if factor.dtype != torch.float32 or valid.dtype != torch.bool or factor.shape != valid.shape:
        return None
    if not _FLOAT32.tiny <= denominator <= _FLOAT32.max:
        return None
    fs, ms = numpy_2d(factor), numpy_2d(valid)
    if fs is None or ms is None:
        return None
    bs, length = fs.shape
    scale = np.float32(denominator)
    row_sum = np.empty(bs, dtype=np.float64)
    step = stats_rows(length)
    buffers = BlockBuffers(min(step, bs), length)

    def divide(rows: slice) -> tuple[float, float, float]:
        chunk = fs[rows]
        np.divide(chunk, scale, out=chunk)
        block = buffers.take(rows.stop - rows.start)
        np.copyto(block, chunk)  # invalid tokens are 0: the metrics' masked float64 copy
        # The max over every token is the max over the valid ones: those are >= 0 and the greatest of them is
        # about 1 or more (a mean of one), where the invalid ones hold 0.
        return block_stats(block, ms[rows], row_sum[rows], high=float(chunk.max()))

    stats = combined(row_sum, chunk_map(bs, divide, step))
    remember(factor, ROW_STATS, stats, valid=valid)
    if math.isfinite(float(stats[3])):  # the max of every token (NaN and inf included)
        remember(factor, FINITE, True)
    return factor
