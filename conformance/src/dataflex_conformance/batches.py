"""Synthetic batches and score tensors for the checks, one named case at a time.

A :class:`Case` names the batch layout (``bs=1``, ``L=1``, empty-mask rows,
padding rows, one group, groups of size 1, bf16/fp16 fields) and, for
actuators, the distribution of the scores they receive (constant, ties,
magnitudes of 1e6 and 1e-6, all negative). Everything is seeded, so two
builds of the same case are identical tensors, and every build is fresh, so
a component that mutates its input cannot leak into the next call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch

from dataflex_core import Batch, group_index

from .fields import KNOWN_FIELDS, FieldContext, FieldSynthesiser, resolve_synthesisers

#: Row value multiplier for padding rows: their fields are junk far from the real rows',
#: so a component that lets them into a statistic visibly changes the other rows' results.
PADDING_JUNK_SCALE = 10.0


@dataclass(frozen=True)
class Case:
    """One batch layout (and, for actuators, one score distribution)."""

    label: str
    bs: int = 8
    length: int = 16
    #: Rows per ``uid`` group: 1 gives singleton groups, ``>= bs`` one group.
    group_size: int = 4
    empty_rows: tuple[int, ...] = ()
    #: Padding rows (``is_padding=True``, shared ``pad`` uid) appended after the ``bs`` real rows.
    padding_rows: int = 0
    dtype: torch.dtype = torch.float32
    #: Distribution of synthetic scores handed to actuators (see :data:`SCORE_DISTRIBUTIONS`).
    scores: str = "normal"
    num_domains: int = 3
    #: How the permutation checks reorder rows: ``rows`` (any order) or ``groups`` (whole uid groups).
    permutation: str = "rows"
    seed: int = 0

    @property
    def rows(self) -> int:
        return self.bs + self.padding_rows


@dataclass
class Sample:
    """A built case: the batch plus the ``ctx`` keyword arguments hosts pass along."""

    batch: Batch
    domains: list[str]
    domain_index: torch.Tensor
    real_rows: int

    @property
    def device(self) -> torch.device:
        return self.batch.batch["response_mask"].device

    def ctx(self) -> dict:
        return {"domains": list(self.domains), "domain_index": self.domain_index.clone()}


def _layout(case: Case, gen: torch.Generator, bs: int, empty_rows: tuple[int, ...]) -> torch.Tensor:
    lengths = torch.randint(1, case.length + 1, (bs,), generator=gen)
    if bs:
        lengths[0] = case.length
    for row in empty_rows:
        if row < bs:
            lengths[row] = 0
    return (torch.arange(case.length).reshape(1, -1) < lengths.reshape(-1, 1)).long()


class BatchFactory:
    """Builds the batch of a case holding every field ``fields`` names.

    :param fields: the ``requires`` of every component that will read the batch.
    :param custom: synthesisers for fields the suite does not know (see :mod:`.fields`).
    :param who: the component(s) asking, for the error naming a missing field.
    """

    def __init__(self, fields: list[str], custom: Mapping[str, FieldSynthesiser] | None = None, who: str = "") -> None:
        # Every known field is present, as in a host that fetched everything: reading an
        # undeclared one then fails check_reads_only_declared alone, not every check.
        wanted = [*fields, *KNOWN_FIELDS, *(custom or {})]
        self.synthesisers = resolve_synthesisers(list(dict.fromkeys(wanted)), custom, who)

    def _rows(self, case: Case, bs: int, seed: int, uid_prefix: str, empty_rows: tuple[int, ...], padding: bool):
        gen = torch.Generator().manual_seed(seed)
        mask = _layout(case, gen, bs, empty_rows)
        if padding:
            uid = np.array(["pad"] * bs, dtype=object)
        else:
            size = max(1, case.group_size)
            uid = np.array([f"{uid_prefix}{i // size}" for i in range(bs)], dtype=object)
        group, num_groups = group_index(uid)
        ctx = FieldContext(
            response_mask=mask,
            uid=uid,
            group=group,
            num_groups=num_groups,
            is_padding=torch.full((bs,), padding),
            prompt_length=4,
            generator=gen,
        )
        tensors: dict[str, torch.Tensor] = {"response_mask": mask}
        objects: dict[str, np.ndarray] = {"uid": uid}
        for name, synth in self.synthesisers.items():
            value = synth(ctx)
            if len(value) != bs:
                raise ValueError(f"synthesiser of field {name!r} returned {len(value)} rows, expected bs={bs}")
            if isinstance(value, torch.Tensor):
                if value.is_floating_point():
                    value = value.to(case.dtype) * (PADDING_JUNK_SCALE if padding else 1.0)
                tensors[name] = value
            else:
                objects[name] = np.asarray(value, dtype=object)
        domain_index = torch.randint(0, case.num_domains, (bs,), generator=gen)
        return tensors, objects, domain_index

    def build(self, case: Case, device: torch.device | str, *, padding_rows: int | None = None) -> Sample:
        """The case's batch on ``device``; ``padding_rows`` overrides the case's count."""
        pad = case.padding_rows if padding_rows is None else padding_rows
        tensors, objects, domain_index = self._rows(case, case.bs, case.seed, f"q{case.seed}-", case.empty_rows, False)
        if pad:
            p_tensors, p_objects, p_domain = self._rows(case, pad, case.seed + 7919, "", (), True)
            tensors = {k: torch.cat([v, p_tensors[k].to(v.dtype)]) for k, v in tensors.items()}
            objects = {k: np.concatenate([v, p_objects[k]]) for k, v in objects.items()}
            domain_index = torch.cat([domain_index, p_domain])
            tensors["is_padding"] = torch.arange(case.bs + pad) >= case.bs
        batch = Batch({k: v.to(device) for k, v in tensors.items()}, objects)
        domains = [f"domain{i}" for i in range(case.num_domains)]
        return Sample(batch, domains, domain_index.to(device), case.bs)


def clone_sample(sample: Sample) -> Sample:
    """A deep copy: fresh tensors and arrays with the same values."""
    batch = Batch(
        {k: v.clone() for k, v in sample.batch.batch.items()},
        {k: v.copy() for k, v in sample.batch.non_tensor_batch.items()},
        sample.batch.meta_info,
    )
    return Sample(batch, list(sample.domains), sample.domain_index.clone(), sample.real_rows)


def permute_sample(sample: Sample, perm: torch.Tensor) -> Sample:
    """Rows of ``sample`` reordered by ``perm`` (every field moves with its row)."""
    perm = perm.to(sample.device)
    return Sample(sample.batch.select_rows(perm), list(sample.domains), sample.domain_index[perm], sample.real_rows)


def row_permutation(bs: int, seed: int) -> torch.Tensor:
    """A random permutation of ``bs`` rows that moves every row (one cycle) when ``bs > 1``."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(bs, generator=gen)
    perm = torch.empty(bs, dtype=torch.long)
    perm[order] = torch.roll(order, -1)
    return perm


def group_permutation(uid: np.ndarray, seed: int) -> torch.Tensor:
    """Reorder whole ``uid`` groups, keeping each group's rows together and in order."""
    group, num_groups = group_index(uid)
    gen = torch.Generator().manual_seed(seed)
    new_rank = torch.randperm(num_groups, generator=gen)
    key = new_rank[group] * (len(uid) + 1) + torch.arange(len(uid))
    return key.argsort()


# -- synthetic scores for actuators --------------------------------------------------------


def _normal(gen, shape):
    return torch.randn(shape, generator=gen)


#: name -> generator of synthetic scores (float32, CPU); the distributions the mean-one
#: contract must survive.
SCORE_DISTRIBUTIONS = {
    "normal": _normal,
    "constant": lambda gen, shape: torch.full(shape, 0.7),
    "zeros": lambda gen, shape: torch.zeros(shape),
    "ties": lambda gen, shape: torch.randint(0, 3, shape, generator=gen).float(),
    "binary": lambda gen, shape: torch.randint(0, 2, shape, generator=gen).float(),
    "unit_interval": lambda gen, shape: torch.rand(shape, generator=gen),
    "huge": lambda gen, shape: 1e6 * torch.randn(shape, generator=gen),
    "huge_positive": lambda gen, shape: 1e6 * (1.0 + torch.rand(shape, generator=gen)),
    "tiny": lambda gen, shape: 1e-6 * torch.randn(shape, generator=gen),
    "negative": lambda gen, shape: -1.0 - 5.0 * torch.rand(shape, generator=gen),
}


#: In-range distributions for actuators whose ``score_range`` is bounded on both sides,
#: as fractions of the range: ``lo + (hi - lo) * u``.
BOUNDED_DISTRIBUTIONS = {
    "normal": lambda gen, shape: torch.rand(shape, generator=gen),
    "constant": lambda gen, shape: torch.full(shape, 0.7),
    "low": lambda gen, shape: torch.zeros(shape),
    "high": lambda gen, shape: torch.ones(shape),
    "ties": lambda gen, shape: torch.randint(0, 3, shape, generator=gen).float() / 2,
    "binary": lambda gen, shape: torch.randint(0, 2, shape, generator=gen).float(),
    "near_low": lambda gen, shape: 1e-6 * torch.rand(shape, generator=gen),
    "near_high": lambda gen, shape: 1.0 - 1e-6 * torch.rand(shape, generator=gen),
}


def score_range_of(cls: type) -> tuple[float, float]:
    """``cls.score_range`` as floats; no declaration means any finite score."""
    declared = getattr(cls, "score_range", None)
    if declared is None:
        return (-math.inf, math.inf)
    return (float(declared[0]), float(declared[1]))


def is_bounded(score_range: tuple[float, float]) -> bool:
    return math.isfinite(score_range[0]) and math.isfinite(score_range[1])


def score_shape(granularity: str, sample: Sample) -> tuple[int, ...]:
    """Shape of scores at ``granularity`` for ``sample``: ``(bs,)``, ``(bs, L)`` or ``(num_domains,)``."""
    mask = sample.batch.batch["response_mask"]
    if granularity == "token":
        return tuple(mask.shape)
    if granularity == "domain":
        return (len(sample.domains),)
    return (int(mask.shape[0]),)


def _into_range(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    if math.isfinite(lo):
        return lo + x.abs()
    if math.isfinite(hi):
        return hi - x.abs()
    return x


def synthetic_scores(
    case: Case, granularity: str, sample: Sample, score_range: tuple[float, float] = (-math.inf, math.inf)
) -> torch.Tensor:
    """Scores of the case's distribution within ``score_range``; padding rows get extreme junk.

    Junk is of magnitude 1e3 (or the top of a bounded range), so a component
    that lets padding rows into a softmax or a mean changes the real rows' result.
    """
    gen = torch.Generator().manual_seed(case.seed + 104729)
    shape = score_shape(granularity, sample)
    lo, hi = score_range
    extra = (shape[0] - sample.real_rows, *shape[1:]) if granularity != "domain" else None
    if is_bounded(score_range):
        u = BOUNDED_DISTRIBUTIONS.get(case.scores, BOUNDED_DISTRIBUTIONS["normal"])(gen, shape)
        scores = lo + (hi - lo) * u
        junk = torch.full(extra, hi) if extra else None
    else:
        scores = _into_range(SCORE_DISTRIBUTIONS[case.scores](gen, shape), lo, hi)
        junk = _into_range(1e3 * (1.0 + torch.rand(extra, generator=gen)), lo, hi) if extra else None
    if junk is not None and junk.shape[0]:
        scores = torch.cat([scores[: sample.real_rows], junk])
    dtype = case.dtype if case.scores == "normal" else torch.float32
    return scores.to(dtype).to(sample.device)


def with_case(case: Case, **changes) -> Case:
    return replace(case, **changes)
