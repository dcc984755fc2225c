"""``mechanism: mix``: per-domain signal after the advantage -> mixer -> which prompts are sampled next.

The mixture acts before rollout, on the host's train sampler (a
:class:`~dataflex_core.step.sampler.DomainMixtureSampler`, or a host's wrapper
around one). After the advantages exist, the scorer runs on the step's
rollouts, each row is mapped to its domain through the dataset column
``domain_key`` (carried with the prompt), and the mixer observes that step;
every ``update_step`` steps (from ``warmup_step`` on) it proposes new
proportions, which the sampler uses from its next block. No loss weights are
written: the loss is the framework's own.

Config (``dataflex:`` block): ``domains`` (list of names, required),
``domain_key`` (dataset column, default ``domain``; ``data_source`` stays free
for verl's reward routing), ``update_step`` (default 1), ``warmup_step``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..config import DataFlexPipeline, to_plain
from ..contracts import check_proportions
from ..errors import ConfigError
from .outputs import checked_scores, component_label

#: Keys of the ``dataflex:`` block that only ``mechanism: mix`` reads, with their defaults.
MIX_KEYS = {"domains": None, "domain_key": "domain", "update_step": 1}


@dataclass(frozen=True)
class MixSettings:
    domains: list[str]
    domain_key: str
    update_step: int


class ProportionSink(Protocol):
    """What the mix step drives: a sampler with the proportions in effect and a way to change them."""

    proportions: torch.Tensor

    def set_proportions(self, proportions: torch.Tensor) -> None: ...


def mix_settings(block: Any) -> MixSettings:
    """The mix keys of the ``dataflex:`` block, checked; raises :class:`ConfigError` with the fix."""
    plain = to_plain(block) or {}
    domains = plain.get("domains")
    if not isinstance(domains, (list, tuple)) or not domains or not all(isinstance(d, str) and d for d in domains):
        raise ConfigError(
            f"dataflex.mechanism=mix needs dataflex.domains, a non-empty list of domain names as they appear in "
            f"the dataset column dataflex.domain_key; got {domains!r}, e.g. domains: [math, code]"
        )
    if len(set(domains)) != len(domains):
        raise ConfigError(f"dataflex.domains must be unique, got {list(domains)}")
    key = plain.get("domain_key", MIX_KEYS["domain_key"])
    if not isinstance(key, str) or not key:
        raise ConfigError(f"dataflex.domain_key must be a dataset column name, got {key!r}")
    update_step = plain.get("update_step", MIX_KEYS["update_step"])
    if isinstance(update_step, bool) or not isinstance(update_step, int) or update_step < 1:
        raise ConfigError(f"dataflex.update_step must be an integer >= 1, got {update_step!r}")
    return MixSettings(list(domains), key, update_step)


def domain_ids(values: Any, domains: list[str], where: str) -> torch.Tensor:
    """Map domain names to ``0..D-1``; a name outside ``domains`` is an error naming it."""
    names = np.asarray(values, dtype=object).astype(str)
    lookup = {d: i for i, d in enumerate(domains)}
    uniq, inverse = np.unique(names, return_inverse=True)  # one lookup per distinct name, not per row
    unknown = [u for u in uniq.tolist() if u not in lookup]
    if unknown:
        raise ConfigError(
            f"{where} has domain value(s) {unknown[:10]} that are not in dataflex.domains={domains}; "
            "add them to dataflex.domains or filter those rows out of the dataset"
        )
    table = np.array([lookup[u] for u in uniq.tolist()], dtype=np.int64)
    return torch.from_numpy(table[inverse.reshape(-1)]) if len(names) else torch.zeros(0, dtype=torch.long)


def initial_proportions(mixer: Any, domains: list[str], owner: str | None = None) -> torch.Tensor:
    """The mixer's proportions before any update, float64 ``(D,)``, checked by the proportions contract."""
    owner = owner or f"mixer {mixer.name or type(mixer).__name__}"
    proposed = torch.as_tensor(mixer.current_proportions(domains))
    return check_proportions(proposed, len(domains), owner=f"{owner} (current_proportions)", step=None)


def mix_step(
    pipeline: DataFlexPipeline,
    settings: MixSettings,
    batch: Any,
    step: int,
    ctx: dict[str, Any],
    sampler: ProportionSink,
) -> dict[str, float]:
    """Score the step's rollouts, feed the mixer, and hand new proportions to ``sampler`` on update steps.

    ``batch`` holds the real rows (framework padding removed) with the scorer's
    fields, ``response_mask`` and the ``domain_key`` column. Returns the step's
    ``dataflex/mix/...`` metrics.
    """
    domains = settings.domains
    index = domain_ids(batch.non_tensor_batch[settings.domain_key], domains, f"field {settings.domain_key!r}")
    extra = {"domains": domains, "domain_index": index, "granularity": pipeline.scorer.granularity}
    ctx = {**ctx, **extra}
    metrics: dict[str, float] = {}
    real = max(len(batch), 1)
    for d, name in enumerate(domains):
        metrics[f"dataflex/mix/batch_fraction/{name}"] = float((index == d).sum()) / real
    updates = (step - pipeline.warmup_step) % settings.update_step == 0
    scores = checked_scores(pipeline, batch, step, ctx)
    mixer = pipeline.actuator
    with torch.no_grad():
        if updates:
            proposed = mixer.act(scores, batch, step_id=step, **ctx)
            owner = component_label(pipeline, "actuator")
            sampler.set_proportions(check_proportions(proposed, len(domains), owner=owner, step=step))
        else:
            mixer.observe(scores, batch, step_id=step, **ctx)
    metrics["dataflex/mix/updated"] = 1.0 if updates else 0.0
    for d, name in enumerate(domains):
        metrics[f"dataflex/mix/proportion/{name}"] = float(sampler.proportions[d])
    return metrics
