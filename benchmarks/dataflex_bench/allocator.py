"""The allocator a figure was measured with, and the state a long-lived trainer leaves it in.

glibc serves an allocation at or above its mmap threshold from a fresh mmap
(page-faulted on first touch, unmapped on free) and a smaller one from heap
memory it keeps for reuse. By default the threshold is dynamic: it starts at
128 KiB and rises to the size of any mmapped chunk freed later, up to 32 MiB.
A trainer process (verl's task runner, TRL's trainer) runs with that default
and has long since freed large buffers, so its threshold sits near 32 MiB:
(bs, L) temporaries just under it come from reused heap memory, those above
it (a float32 (32768, 256) tensor is exactly 32 MiB plus a header) from
fresh pages on every call.

Pair figures are judged with that default, in one process, after
:func:`settle` (a run of large allocations). For comparison the same pairs
also run in a child process with ``MALLOC_MMAP_THRESHOLD_`` fixed
(:data:`FIXED_ENV`), which disables the dynamic threshold: every temporary
above 1 MiB is a fresh mmap at every size, which is what the group-scaling
figure needs to measure the code rather than the 32 MiB boundary.
"""

from __future__ import annotations

import os

import torch

ENV = "MALLOC_MMAP_THRESHOLD_"
FIXED_VALUE = str(1 << 20)
#: The environment of the fixed-threshold child.
FIXED_ENV = {ENV: FIXED_VALUE}
#: Sizes (MiB) allocated, touched and freed by :func:`settle`, small to large.
SETTLE_MIB = (1, 2, 4, 8, 16, 24, 31, 64, 256)


def describe(env: dict[str, str] | None = None) -> str:
    """The allocator setting in ``env`` (default: this process's), as the figures' notes name it."""
    value = (os.environ if env is None else env).get(ENV)
    return "glibc default (dynamic mmap threshold)" if value is None else f"{ENV}={value}"


def is_default() -> bool:
    return ENV not in os.environ


def settle() -> None:
    """Leave the allocator as a long-lived trainer has it: large buffers allocated, touched and freed.

    With the default dynamic threshold, freeing the mmapped 1-31 MiB buffers
    raises the threshold to about 31 MiB; the larger ones are mmapped whatever
    the threshold. With a fixed threshold nothing changes.
    """
    for mib in SETTLE_MIB:
        buffer = torch.ones(mib * (1 << 20) // 4)
        del buffer
