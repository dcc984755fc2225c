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

import itertools
import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")

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


#: Bytes from which :func:`fresh_cpu` takes a tensor's memory from numpy's allocator (numpy advises huge pages
#: on allocations of 4 MiB and more).
HUGE_PAGE_BYTES = 4 << 20


def fresh_cpu(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor for an output of the step; a large one in memory numpy allocates.

    A fresh ``(bs, L)`` output is mostly page faults: the kernel maps and zeroes it on its first write. numpy
    advises transparent huge pages (``madvise``) on its large allocations, torch's CPU allocator does not, so
    on a kernel whose THP mode is ``madvise`` (the common default) the first write of a 128 MiB tensor takes
    64 faults of 2 MiB instead of 32768 of 4 KiB: 3-4x faster on one thread, and threads stop queueing on the
    process's page tables (with THP off the kernel ignores the advice: the same cost as ``torch.empty``).
    Small tensors and dtypes numpy lacks are ``torch.empty``'s. The tensor owns its memory (numpy's array lives
    as long as it does); it is not resizable in place.
    """
    sizes = tuple(int(size) for size in shape)
    np_dtype = _NUMPY_DTYPES.get(dtype)
    if np_dtype is None or math.prod(sizes) * np.dtype(np_dtype).itemsize < HUGE_PAGE_BYTES:
        return torch.empty(sizes, dtype=dtype)
    return torch.from_numpy(np.empty(sizes, dtype=np_dtype))


_NUMPY_DTYPES = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
}


def flat_numpy(x: torch.Tensor) -> np.ndarray | None:
    """``x``'s memory as a 1-D numpy array (a view), or None: not a contiguous CPU tensor numpy can read."""
    if x.device.type != "cpu" or x.dtype == torch.bfloat16 or x.requires_grad or not x.is_contiguous():
        return None
    return x.numpy().reshape(-1)


def numpy_chunks(n: int) -> Iterator[slice]:
    """Consecutive ranges of :data:`NUMPY_CHUNK` covering ``0..n``."""
    for start in range(0, n, NUMPY_CHUNK):
        yield slice(start, min(start + NUMPY_CHUNK, n))


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


def _set_per_row(flags: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """int64 sums of the 0/1 bytes ``flags`` along the last axis. Summed in int32 where a row cannot overflow it
    (numpy's int32 sum of bytes is about twice as fast as its int64 one), then widened."""
    if flags.shape[-1] >= 1 << 31:
        return np.add.reduce(flags, axis=-1, dtype=np.int64, out=out)
    sums = np.add.reduce(flags, axis=-1, dtype=np.int32)
    if out is None:
        return sums.astype(np.int64)
    np.copyto(out, sums)
    return out


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


#: Chunks each worker takes at least before a pass is split between threads (below that, threads cost more).
_MIN_CHUNKS_PER_WORKER = 4
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_PID = 0


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's chunk threads, at least ``workers``; a new pool in a forked child (its parent's threads are
    not there: work handed to the inherited pool would wait for ever)."""
    global _POOL, _POOL_SIZE, _POOL_PID
    if _POOL is None or _POOL_SIZE < workers or _POOL_PID != os.getpid():
        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dataflex-chunks")
        _POOL_SIZE, _POOL_PID = workers, os.getpid()
    return _POOL


def chunk_map(n: int, body: Callable[[slice], T], chunk: int = NUMPY_CHUNK) -> list[T]:
    """``body(s)`` for the consecutive ranges of ``chunk`` covering ``0..n``, in order, on as many threads as torch
    uses (``torch.get_num_threads()``).

    A numpy pass runs on one core where torch's own ops use every thread torch has; numpy releases the GIL in
    its loops, so threads share the pass (page faults of a fresh output included). Each thread, the calling one
    among them, takes the next chunk not yet taken until none is left: on cores shared with other processes a
    thread that waits for a core holds up one chunk, not a fixed share of the pass. The chunks and the order of
    the results are those of the serial loop, so a caller that adds the results in order gets the serial sum bit
    for bit. ``body`` must only write inside its range.
    """
    ranges = [slice(start, min(start + chunk, n)) for start in range(0, n, chunk)]
    workers = min(torch.get_num_threads(), len(ranges) // _MIN_CHUNKS_PER_WORKER)
    if workers <= 1:
        return [body(r) for r in ranges]
    results: list[T] = [None] * len(ranges)  # type: ignore[list-item]
    taken = itertools.count()  # next() on it is one step under the GIL: each index goes to one thread
    failed: list[bool] = []

    def work() -> None:
        while not failed:
            index = next(taken)
            if index >= len(ranges):
                return
            try:
                results[index] = body(ranges[index])
            except BaseException:
                failed.append(True)  # the other threads stop at their next chunk
                raise

    futures = [_pool(workers - 1).submit(work) for _ in range(workers - 1)]
    try:
        work()
    finally:
        for future in futures:
            future.exception()  # every thread is done with the pass before it returns or raises
    for future in futures:
        future.result()
    return results


def masked_row_any_nonzero(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: rows of a ``(bs, L)`` tensor with a nonzero value where the bool ``mask`` is set.

    On the CPU in numpy, blocks of rows shared by torch's threads (:func:`chunk_map`; a compare, an and, an any
    on a block in cache: no float temporary); elsewhere :func:`masked_row_reduce`.
    """
    xs, ms = flat_numpy(x), flat_numpy(mask)
    if xs is None or ms is None or x.dim() != 2 or mask.shape != x.shape or mask.dtype != torch.bool:
        return masked_row_reduce(x, mask.bool(), 0.0, lambda block: (block != 0).any(-1))
    rows_, length = x.shape
    values, valid = xs.reshape(rows_, length), ms.reshape(rows_, length)
    out = np.empty(rows_, dtype=bool)

    def block(rows: slice) -> None:
        nonzero = np.not_equal(values[rows], 0)
        np.logical_and(nonzero, valid[rows], out=nonzero)
        np.logical_or.reduce(nonzero, axis=1, out=out[rows])

    chunk_map(rows_, block, max(1, NUMPY_CHUNK // max(1, length)))
    return torch.from_numpy(out)


def bool_and_row_counts(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(mask.bool(), its set positions per row)`` of a 2-D integer or float CPU mask, in one numpy pass of row
    blocks shared by torch's threads (each block compared with 0, then counted while in cache); None for a
    bool mask (``bool()`` is the mask itself, :func:`row_counts` counts it) or where numpy cannot read it."""
    xs = flat_numpy(mask)
    if xs is None or mask.dim() != 2 or mask.dtype == torch.bool or xs.dtype.kind not in "iuf":
        return None
    rows_, length = mask.shape
    values = xs.reshape(rows_, length)
    out = fresh_cpu((rows_, length), torch.bool)
    flags = out.numpy()
    counts = np.empty(rows_, dtype=np.int64)

    def block(rows: slice) -> None:
        np.not_equal(values[rows], 0, out=flags[rows])  # NaN is set, as bool() reads it
        _set_per_row(flags[rows].view(np.uint8), out=counts[rows])

    chunk_map(rows_, block, max(1, NUMPY_CHUNK // max(1, length)))
    return out, torch.from_numpy(counts)
