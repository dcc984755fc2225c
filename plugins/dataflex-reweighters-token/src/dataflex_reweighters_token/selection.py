"""Exact k-th smallest of the valid entries of a large tensor, without selecting over all of them.

``kthvalue`` over tens of millions of tokens copies and partitions the whole
tensor. A random sample brackets the answer between two of its order
statistics; one pass of comparisons counts the valid values below the
bracket and gathers those inside it (a few percent), and only those are
selected from. The result is exact: when the bracket misses (rare for a
random sample; certain when the sample is fooled) it falls back to a
selection over every valid value.

On the CPU every step runs in numpy, on views of the tensors' memory, the
pass chunk by chunk while the chunk is in cache: numpy's comparisons, mask
counts, boolean gathers and ``partition`` are vector loops where torch's
CPU kernels are several times slower (``count_nonzero``, ``nonzero`` and
``kthvalue`` above all), and a numpy call is never a parallel region that
waits for every torch thread to get a core (on oversubscribed cores each
such wait costs milliseconds). On other devices the same steps are torch ops.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from dataflex_core import count_set

#: Up to this many valid values a plain selection over all of them is as fast as bracketing.
DIRECT_LIMIT = 1 << 20
#: Size of the random sample that brackets the answer.
SAMPLE_SIZE = 1 << 16
#: Values compared per step on the CPU: the chunk and its two masks (1.5 MiB of float32) stay in L2.
CHUNK = 1 << 18


def kth_smallest(values: torch.Tensor, k: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """The ``k``-th smallest (1-based) of ``values`` (only where ``valid``, when given), as a 0-dim tensor."""
    return select_kth(values, k, valid)[0]


def select_kth(
    values: torch.Tensor, k: int, valid: torch.Tensor | None = None, count: int | None = None
) -> tuple[torch.Tensor, int]:
    """The ``k``-th smallest valid value (a 0-dim tensor) and how many valid values are strictly smaller.

    :param values: any shape; NaN is not supported (the reweighter checks finiteness first).
    :param valid: bool mask shaped like ``values``; ``None``: every value counts.
    :param count: the number of valid values when the caller knows it (saves counting them again).
    """
    flat = values.reshape(-1)
    mask = None if valid is None else valid.reshape(-1)
    if count is None:
        count = flat.numel() if mask is None else count_set(mask)
    if not 1 <= k <= count:
        raise ValueError(f"k={k} is outside 1..{count}")
    xs = numpy_view(flat)
    ops: _Ops = _NumpyOps(xs, None if mask is None else mask.numpy()) if xs is not None else _TorchOps(flat, mask)
    value, below = _select(ops, k, count)
    return torch.as_tensor(value, dtype=values.dtype, device=values.device).reshape(()), below


def numpy_view(x: torch.Tensor) -> np.ndarray | None:
    """The CPU tensor ``x`` as a numpy array on the same memory, or None (another device, or no numpy dtype)."""
    if x.device.type != "cpu" or x.dtype == torch.bfloat16:
        return None
    return x.detach().numpy()


def chunks(n: int, size: int | None = None) -> Iterator[slice]:
    """Consecutive ranges of ``size`` (default :data:`CHUNK`) covering ``0..n``."""
    step = size or CHUNK
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def sample_positions(n: int, size: int) -> np.ndarray:
    """``size`` random positions in ``0..n-1``, the same every call (seeded).

    Random positions, not a stride: a stride can resonate with the row length of a
    flattened (bs, L) tensor and see only the first tokens of every row.
    """
    return np.random.default_rng(0).integers(n, size=size)


def _select(ops: _Ops, k: int, count: int) -> tuple[object, int]:
    """(k-th smallest valid value, valid values below it), by bracketing when there are many."""
    if count <= DIRECT_LIMIT:
        return _direct(ops, ops.valid_values(), k)
    sample = ops.sample(SAMPLE_SIZE)
    m = len(sample)
    if ops.masked and 8 * m < SAMPLE_SIZE:  # under 1 in 8 valid: a loose bracket; gather the valid first
        return _select(ops.only_valid(), k, count)
    # The bracket holds the k-th value unless the sample is off by six standard deviations.
    p = k / count
    margin = 6.0 * math.sqrt(m * p * (1.0 - p)) + 16.0
    lo_at, hi_at = math.floor(p * m - margin), math.ceil(p * m + margin)
    # A bracket edge past the sample's end is open: the extremes may lie beyond the sample.
    low = ops.kth(sample, lo_at + 1) if lo_at >= 0 else -math.inf
    high = ops.kth(sample, hi_at + 1) if hi_at < m else math.inf
    at_least_low, band = ops.count_and_band(low, high)
    below = count - at_least_low
    if below < k <= below + len(band):
        value, below_in_band = _direct(ops, band, k - below)
        return value, below + below_in_band
    return _direct(ops, ops.valid_values(), k)


def _direct(ops: _Ops, pool, k: int) -> tuple[object, int]:
    value = ops.kth(pool, k)
    return value, ops.count_below(pool, value)


class _Ops:
    """The steps of the selection on one kind of array; ``pool`` arguments are 1-D arrays of valid values."""

    masked: bool

    def valid_values(self): ...
    def only_valid(self) -> _Ops: ...
    def sample(self, size: int): ...
    def kth(self, pool, k: int): ...
    def count_below(self, pool, value) -> int: ...
    def count_and_band(self, low: float, high: float) -> tuple[int, object]: ...


class _NumpyOps(_Ops):
    def __init__(self, xs: np.ndarray, ms: np.ndarray | None) -> None:
        self.xs, self.ms, self.masked = xs, ms, ms is not None

    def valid_values(self) -> np.ndarray:
        return self.xs if self.ms is None else self.xs[self.ms]

    def only_valid(self) -> _NumpyOps:
        return _NumpyOps(self.valid_values(), None)

    def sample(self, size: int) -> np.ndarray:
        positions = sample_positions(self.xs.size, size)
        sample = self.xs[positions]
        return sample if self.ms is None else sample[self.ms[positions]]

    def kth(self, pool: np.ndarray, k: int):
        return np.partition(pool, k - 1)[k - 1]

    def count_below(self, pool: np.ndarray, value) -> int:
        return int(np.count_nonzero(pool < value))

    def count_and_band(self, low: float, high: float) -> tuple[int, np.ndarray]:
        xs, ms = self.xs, self.ms
        lo, hi = xs.dtype.type(low), xs.dtype.type(high)
        held = np.empty((2, min(CHUNK, xs.size)), dtype=bool)
        at_least_low, pieces = 0, []
        for start in range(0, xs.size, CHUNK):
            rows = slice(start, min(start + CHUNK, xs.size))
            size = rows.stop - rows.start
            x, in_band, upper = xs[rows], held[0, :size], held[1, :size]
            np.greater_equal(x, lo, out=in_band)
            if ms is not None:
                np.logical_and(in_band, ms[rows], out=in_band)
            at_least_low += int(np.count_nonzero(in_band))
            np.logical_and(in_band, np.less_equal(x, hi, out=upper), out=in_band)
            pieces.append(np.extract(in_band, x))
        return at_least_low, np.concatenate(pieces) if pieces else xs[:0]


class _TorchOps(_Ops):
    def __init__(self, flat: torch.Tensor, mask: torch.Tensor | None) -> None:
        self.flat, self.mask, self.masked = flat, mask, mask is not None

    def valid_values(self) -> torch.Tensor:
        return self.flat if self.mask is None else self.flat[self.mask]

    def only_valid(self) -> _TorchOps:
        return _TorchOps(self.valid_values(), None)

    def sample(self, size: int) -> torch.Tensor:
        positions = torch.from_numpy(sample_positions(self.flat.numel(), size)).to(self.flat.device)
        sample = self.flat.index_select(0, positions)
        return sample if self.mask is None else sample[self.mask.index_select(0, positions)]

    def kth(self, pool: torch.Tensor, k: int) -> torch.Tensor:
        return pool.kthvalue(k).values

    def count_below(self, pool: torch.Tensor, value) -> int:
        return int(torch.count_nonzero(pool < value))

    def count_and_band(self, low: float, high: float) -> tuple[int, torch.Tensor]:
        flat = self.flat
        at_least_low = flat >= low
        if self.mask is not None:
            at_least_low &= self.mask
        return int(torch.count_nonzero(at_least_low)), flat[at_least_low & (flat <= high)]
