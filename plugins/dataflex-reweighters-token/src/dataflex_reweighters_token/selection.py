"""Exact k-th smallest value of a large tensor without selecting over all of it.

``kthvalue`` over tens of millions of tokens copies and partitions the whole
tensor. A random sample brackets the answer between two of its order
statistics; counting below the bracket and selecting inside it touches the
full tensor only with comparisons (chunk by chunk on the CPU, so no
full-size mask is built). The result is exact: when the bracket misses (rare
for a random sample; certain when the sample is fooled) it falls back to
``kthvalue`` on everything.
"""

from __future__ import annotations

import math

import torch

#: Below this many values a plain ``kthvalue`` is as fast as bracketing.
DIRECT_LIMIT = 1 << 20
#: Size of the random sample that brackets the answer.
SAMPLE_SIZE = 1 << 16
#: Values compared per step on the CPU (4 MiB of float32: held by the last-level cache; fewer, larger
#: chunks mean fewer parallel regions, which are slow when the cores are oversubscribed).
CHUNK = 1 << 20


def kth_smallest(values: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k``-th smallest (1-based) of the 1-D tensor ``values``, as a 0-dim tensor."""
    n = values.numel()
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..{n}")
    if n <= DIRECT_LIMIT:
        return values.kthvalue(k).values
    # Random positions, not a stride: a stride can resonate with the row length of a
    # flattened (bs, L) tensor and see only the first tokens of every row.
    generator = torch.Generator(device=values.device).manual_seed(0)
    positions = torch.randint(n, (SAMPLE_SIZE,), generator=generator, device=values.device)
    sample = values[positions].sort().values
    m = sample.numel()
    p = k / n
    margin = 6.0 * math.sqrt(m * p * (1.0 - p)) + 16.0
    lo_at, hi_at = math.floor(p * m - margin), math.ceil(p * m + margin)
    # A bracket edge past the sample's end is open: the extremes may lie beyond the sample.
    low = sample[lo_at] if lo_at >= 0 else values.new_tensor(float("-inf"))
    high = sample[hi_at] if hi_at < m else values.new_tensor(float("inf"))
    below, band = _count_below_and_band(values, low, high)
    if below < k and k - below <= band.numel():
        return band.kthvalue(k - below).values
    return values.kthvalue(k).values


def _count_below_and_band(values: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> tuple[int, torch.Tensor]:
    """How many values lie below ``low``, and the values in ``[low, high]``.

    On the CPU the comparisons run chunk by chunk while the chunk is in cache
    (one pass over memory, no full-size masks); on a GPU in one go.
    """
    if values.device.type != "cpu":
        at_least_low = values >= low
        below = values.numel() - int(torch.count_nonzero(at_least_low))
        return below, values[at_least_low & (values <= high)]
    below, pieces = 0, []
    for chunk in values.split(CHUNK):
        at_least_low = chunk >= low
        below += chunk.numel() - int(torch.count_nonzero(at_least_low))
        pieces.append(chunk[at_least_low.logical_and_(chunk <= high)])
    return below, torch.cat(pieces)
