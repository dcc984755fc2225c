"""Synthetic batches and score tensors for the checks, one named case at a time.

A batch here is what a host hands a component: real rows only (hosts remove
the framework's padding rows first), some of them with an empty response
(``response_mask`` all 0) inside their ``uid`` group, as real batches have.
A :class:`Case` names the layout (``bs=1``, ``L=1``, which rows are empty,
one group, groups of size 1, bf16/fp16 fields) and, for actuators, the
distribution of the scores they receive (constant, ties, magnitudes of 1e6
and 1e-6, all negative). Every case has an empty row unless it is too small
to hold one. Empty rows carry junk field values and junk scores far from
the others', so a component that lets them into a statistic visibly changes
the other rows' results. Everything is seeded, so two builds of the same
case are identical tensors, and every build is fresh, so a component that
mutates its input cannot leak into the next call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch

from dataflex_core import Batch, group_index

from .fields import KNOWN_FIELDS, FieldContext, FieldSynthesiser, resolve_synthesisers

#: Field value multiplier for empty-response rows: their fields are junk far from the other
#: rows', so a component that lets them into a statistic visibly changes the other rows' results.
EMPTY_ROW_JUNK_SCALE = 10.0
#: The empty row every case has unless it says otherwise (or is too small): row 5 sits inside
#: the second ``uid`` group of the default layout, beside three rows with a response.
DEFAULT_EMPTY_ROWS = (5,)


@dataclass(frozen=True)
class Case:
    """One batch layout (and, for actuators, one score distribution)."""

    label: str
    bs: int = 8
    length: int = 16
    #: Rows per ``uid`` group: 1 gives singleton groups, ``>= bs`` one group.
    group_size: int = 4
    #: Rows with an empty response (``response_mask`` all 0); indices ``>= bs`` are ignored.
    empty_rows: tuple[int, ...] = DEFAULT_EMPTY_ROWS
    #: Framework padding rows (``is_padding`` True, and an empty ``response_mask`` as verl's have).
    padding_rows: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    #: Distribution of synthetic scores handed to actuators (see :data:`SCORE_DISTRIBUTIONS`).
    scores: str = "normal"
    num_domains: int = 3
    #: How the permutation checks reorder rows: ``rows`` (any order) or ``groups`` (whole uid groups).
    permutation: str = "rows"
    #: Synthetic sample scores equal within each ``uid`` group (the valid rows take their group's first
    #: valid row's score), as a group scorer gives them: the admission checks' input.
    group_scores: bool = False
    seed: int = 0

    @property
    def empty(self) -> tuple[int, ...]:
        """The empty rows this case really has."""
        return tuple(sorted({r for r in (*self.empty_rows, *self.padding_rows) if 0 <= r < self.bs}))


@dataclass
class Sample:
    """A built case: the batch plus the ``ctx`` keyword arguments hosts pass along."""

    batch: Batch
    domains: list[str]
    domain_index: torch.Tensor
    #: The scores of the scorer feeding an actuator, once computed for this batch (see ``Probe.scores``).
    scores: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.batch.batch["response_mask"].device

    @property
    def nonempty(self) -> torch.Tensor:
        """``(bs,)`` bool: rows with at least one response token."""
        return self.batch.batch["response_mask"].bool().any(-1)

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

    def build(self, case: Case, device: torch.device | str) -> Sample:
        """The case's batch on ``device``."""
        bs = case.bs
        gen = torch.Generator().manual_seed(case.seed)
        mask = _layout(case, gen, bs, case.empty)
        size = max(1, case.group_size)
        uid = np.array([f"q{case.seed}-{i // size}" for i in range(bs)], dtype=object)
        group, num_groups = group_index(uid)
        padding = torch.zeros(bs, dtype=torch.bool)
        padding[[r for r in case.padding_rows if 0 <= r < bs]] = True
        ctx = FieldContext(
            response_mask=mask,
            uid=uid,
            group=group,
            num_groups=num_groups,
            is_padding=padding,
            prompt_length=4,
            generator=gen,
        )
        junk = torch.ones(bs, dtype=torch.float32)
        junk[list(case.empty)] = EMPTY_ROW_JUNK_SCALE
        tensors: dict[str, torch.Tensor] = {"response_mask": mask}
        if padding.any():  # as hosts that keep framework padding hand it over
            tensors["is_padding"] = padding
        objects: dict[str, np.ndarray] = {"uid": uid}
        made, made_objects = synthesise(self.synthesisers, ctx, bs, "field", f"bs={bs}")
        for name, value in made.items():
            if value.is_floating_point():
                value = (value * junk.reshape(-1, *[1] * (value.dim() - 1)).to(value.dtype)).to(case.dtype)
            tensors[name] = value
        objects.update(made_objects)
        domain_index = torch.randint(0, case.num_domains, (bs,), generator=gen)
        batch = Batch({k: v.to(device) for k, v in tensors.items()}, objects)
        domains = [f"domain{i}" for i in range(case.num_domains)]
        return Sample(batch, domains, domain_index.to(device))


def synthesise(
    synthesisers: Mapping[str, FieldSynthesiser], ctx: FieldContext, rows: int, what: str, expected: str
) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """Every synthesiser's rows, as tensors and object arrays: the batch side's fields and the prompt side's
    dataset columns alike. A synthesiser giving another number of rows than ``rows`` is a ``ValueError``."""
    tensors: dict[str, torch.Tensor] = {}
    objects: dict[str, np.ndarray] = {}
    for name, synth in synthesisers.items():
        value = synth(ctx)
        if len(value) != rows:
            raise ValueError(f"synthesiser of {what} {name!r} returned {len(value)} rows, expected {expected}")
        if isinstance(value, torch.Tensor):
            tensors[name] = value
        else:
            objects[name] = np.asarray(value, dtype=object)
    return tensors, objects


def clone_sample(sample: Sample) -> Sample:
    """A deep copy: fresh tensors and arrays with the same values (cached scores included)."""
    batch = Batch(
        {k: v.clone() for k, v in sample.batch.batch.items()},
        {k: v.copy() for k, v in sample.batch.non_tensor_batch.items()},
        sample.batch.meta_info,
    )
    scores = None if sample.scores is None else sample.scores.clone()
    return Sample(batch, list(sample.domains), sample.domain_index.clone(), scores)


def subset_sample(sample: Sample, rows: torch.Tensor, granularity: str | None = None) -> Sample:
    """The sample restricted to ``rows`` (bool mask or indices); per-row cached scores follow their rows."""
    rows = rows.to(sample.device)
    index = rows.nonzero(as_tuple=True)[0] if rows.dtype == torch.bool else rows
    scores = sample.scores
    if scores is not None and granularity != "domain":
        scores = scores[index.to(scores.device)]
    return Sample(sample.batch.select_rows(index), list(sample.domains), sample.domain_index[index], scores)


def permute_sample(sample: Sample, perm: torch.Tensor, granularity: str | None = None) -> Sample:
    """Rows of ``sample`` reordered by ``perm`` (every field moves with its row)."""
    return subset_sample(sample, perm, granularity)


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


def _per_group(scores: torch.Tensor, sample: Sample) -> torch.Tensor:
    """``scores`` with each group's valid rows set to its first valid row's score (empty rows keep theirs)."""
    index, _ = group_index(sample.batch.non_tensor_batch["uid"])
    valid = sample.nonempty.cpu()
    rows = torch.arange(len(scores))
    first = torch.full((int(index.max()) + 1,), len(scores)).scatter_reduce(0, index[valid], rows[valid], "amin")
    out = scores.clone()
    out[valid] = scores[first[index[valid]]]
    return out


def distribution_scores(
    case: Case, shape: tuple[int, ...], score_range: tuple[float, float], gen: torch.Generator
) -> torch.Tensor:
    """Scores of the case's distribution (``case.scores``) inside ``score_range``: the one draw both the batch
    side's and the prompt side's synthetic scores make."""
    lo, hi = score_range
    if is_bounded(score_range):
        u = BOUNDED_DISTRIBUTIONS.get(case.scores, BOUNDED_DISTRIBUTIONS["normal"])(gen, shape)
        return lo + (hi - lo) * u
    return _into_range(SCORE_DISTRIBUTIONS[case.scores](gen, shape), lo, hi)


def synthetic_scores(
    case: Case, granularity: str, sample: Sample, score_range: tuple[float, float] = (-math.inf, math.inf)
) -> torch.Tensor:
    """Scores of the case's distribution within ``score_range``; empty-response rows get extreme junk.

    Junk is ten times the largest real score plus 1e3 (or the top of a bounded range),
    so a component that lets empty rows into a softmax, a mean or a z-score changes the
    other rows' result, and a softmax over every row gives the empty ones weight.
    """
    gen = torch.Generator().manual_seed(case.seed + 104729)
    shape = score_shape(granularity, sample)
    lo, hi = score_range
    scores = distribution_scores(case, shape, score_range, gen)
    if granularity != "domain":
        empty = ~sample.nonempty.cpu()
        if empty.any():
            rows = (int(empty.sum()), *shape[1:])
            if is_bounded(score_range):
                junk = torch.full(rows, hi)
            else:  # above every real score, so a softmax over all rows puts its weight there
                top = float(scores[~empty].abs().max()) if (~empty).any() else 0.0
                junk = _into_range((10.0 * top + 1e3) * (1.0 + torch.rand(rows, generator=gen)), lo, hi)
            scores[empty] = junk
        if case.group_scores and granularity != "token":
            scores = _per_group(scores, sample)
    dtype = case.dtype if case.scores == "normal" else torch.float32
    return scores.to(dtype).to(sample.device)


def with_case(case: Case, **changes) -> Case:
    return replace(case, **changes)
