"""Row-wise reductions of ``(bs, L)`` tensors without a ``(bs, L)`` temporary on the CPU.

A full-size temporary costs a fresh allocation (page faults when glibc maps
it), a write and a read: at ``(bs, L)`` as much as the reduction itself, and
it raises the step's peak memory by its size. Some costs hide in plain
torch: ``mask.sum(-1)`` on a bool mask first copies it to int64, eight bytes
per token. Here blocks of rows go through one buffer that the cache holds (4 MiB
with one torch thread; under torch's parallel grain with several, see
:data:`SERIAL_ELEMENTS`). On other devices (and for tensors autograd tracks) the plain
full-size expression is used: the GPU caching allocator makes temporaries
cheap and a Python loop would cost a kernel launch per block.

Bool masks on the CPU are counted by numpy on the same memory: its counts
are vector loops with no temporary, several times faster than torch's
``count_nonzero`` there, and a numpy call is not a parallel region (on
oversubscribed cores each torch op waits until every torch thread gets one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

#: Elements per block of rows with one torch thread: 4 MiB of float32, held by the last-level cache.
BLOCK_ELEMENTS = 1 << 20
#: With several torch threads, blocks stay under torch's parallel grain (``at::internal::GRAIN_SIZE``,
#: 32768 elements), so each op on a block runs on the calling thread: an op on more elements is an
#: OpenMP parallel region, and on oversubscribed cores every region waits until all of torch's threads
#: get a core (with 2 threads at load 4, each op on a 4 MiB block took 10-28 ms instead of under 1).
SERIAL_ELEMENTS = (1 << 15) - 1


def block_rows(length: int) -> int:
    """Rows per block for rows of ``length`` elements (fewer with several torch threads, see above)."""
    elements = BLOCK_ELEMENTS if torch.get_num_threads() == 1 else min(BLOCK_ELEMENTS, SERIAL_ELEMENTS)
    return max(1, elements // max(1, length))


def blockwise(x: torch.Tensor) -> bool:
    """True when ``x`` is a CPU 2-D tensor larger than a block that autograd does not track."""
    return (
        x.device.type == "cpu"
        and x.dim() == 2
        and x.shape[0] > block_rows(x.shape[1])
        and not (x.requires_grad and torch.is_grad_enabled())
    )


def row_slices(rows: int, length: int) -> Iterator[slice]:
    """Consecutive row ranges covering ``rows`` rows, one block each."""
    step = block_rows(length)
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


#: Elements per chunk of the numpy passes on the CPU: a float32 chunk and two masks (1.5 MiB) stay in L2.
NUMPY_CHUNK = 1 << 18


def flat_numpy(x: torch.Tensor) -> np.ndarray | None:
    """``x``'s memory as a 1-D numpy array (a view), or None: not a contiguous CPU tensor numpy can read."""
    if x.device.type != "cpu" or x.dtype == torch.bfloat16 or x.requires_grad or not x.is_contiguous():
        return None
    return x.numpy().reshape(-1)


def count_set(mask: torch.Tensor) -> int:
    """Set positions of a mask (any dtype, nonzero = set), as an int."""
    if mask.device.type == "cpu" and mask.dtype == torch.bool:
        return int(np.count_nonzero(mask.numpy()))
    return int(torch.count_nonzero(mask))


def row_counts(mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` int64: set positions per row of a ``(bs, L)`` mask (any dtype, nonzero = set)."""
    if mask.device.type == "cpu" and mask.dtype == torch.bool and mask.dim() > 0:
        # A bool is one byte, 0 or 1: numpy sums the bytes of each row, no copy made.
        return torch.from_numpy(np.asarray(_set_per_row(mask.numpy().view(np.uint8))))
    if not blockwise(mask):
        return torch.count_nonzero(mask, dim=-1)
    out = torch.empty(mask.shape[0], dtype=torch.int64)
    for rows in row_slices(*mask.shape):
        out[rows] = torch.count_nonzero(mask[rows], dim=-1)
    return out


def _set_per_row(flags: np.ndarray) -> np.ndarray:
    """int64 sums of the 0/1 bytes ``flags`` along the last axis. Summed in int32 where a row cannot overflow it
    (numpy's int32 sum of bytes is about twice as fast as its int64 one), then widened."""
    if flags.shape[-1] >= 1 << 31:
        return np.add.reduce(flags, axis=-1, dtype=np.int64)
    return np.add.reduce(flags, axis=-1, dtype=np.int32).astype(np.int64)


def masked_row_reduce(
    x: torch.Tensor,
    mask: torch.Tensor,
    fill: float,
    reduce: Callable[[torch.Tensor], torch.Tensor],
    magnitude: bool = False,
) -> torch.Tensor:
    """``reduce`` (over the last dim) of ``where(mask, x, fill)``, or of ``|x|`` there with ``magnitude``.

    :param mask: bool, shaped like ``x``.
    """
    fill_value = torch.full((), fill, dtype=x.dtype, device=x.device)
    if not (blockwise(x) and mask.shape == x.shape):
        return reduce(torch.where(mask, x.abs() if magnitude else x, fill_value))
    buffer = torch.empty((block_rows(x.shape[1]), x.shape[1]), dtype=x.dtype)
    out: torch.Tensor | None = None
    for rows in row_slices(*x.shape):
        block = buffer[: rows.stop - rows.start]
        torch.where(mask[rows], x[rows], fill_value, out=block)
        if magnitude:
            block.abs_()
        reduced = reduce(block)
        if out is None:
            out = torch.empty(x.shape[0], dtype=reduced.dtype)
        out[rows] = reduced
    assert out is not None
    return out


def masked_row_any_nonzero(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: rows of a ``(bs, L)`` tensor with a nonzero value where the bool ``mask`` is set.

    On the CPU in numpy, block by block of rows (a compare, an and, an any on a block in cache: no
    ``(bs, L)`` temporary); elsewhere :func:`masked_row_reduce`.
    """
    xs, ms = flat_numpy(x), flat_numpy(mask)
    if xs is None or ms is None or x.dim() != 2 or mask.shape != x.shape or mask.dtype != torch.bool:
        return masked_row_reduce(x, mask.bool(), 0.0, lambda block: (block != 0).any(-1))
    rows_, length = x.shape
    values, valid = xs.reshape(rows_, length), ms.reshape(rows_, length)
    out = np.empty(rows_, dtype=bool)

    step = max(1, NUMPY_CHUNK // max(1, length))
    for start in range(0, rows_, step):
        rows = slice(start, start + step)
        nonzero = np.not_equal(values[rows], 0)
        np.logical_and(nonzero, valid[rows], out=nonzero)
        np.logical_or.reduce(nonzero, axis=1, out=out[rows])
    return torch.from_numpy(out)
