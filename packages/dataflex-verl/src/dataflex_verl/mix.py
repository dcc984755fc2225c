"""``mechanism: mix``: per-domain signal after the advantage -> mixer -> which prompts are sampled next.

The mixture acts before rollout, on the train dataloader's sampler
(:class:`~dataflex_verl.mixture_sampler.DomainMixtureSampler`), which draws
from the whole dataset by domain. After verl has computed advantages, the
scorer runs on the step's rollouts, each row is mapped to its domain through
the dataset column ``domain_key`` (carried into the queue with the prompt),
and the mixer observes that step; every ``update_step`` steps (from
``warmup_step`` on) it proposes new proportions, which the sampler uses from
its next batch. No loss weights are written: the loss is verl's own.

Config (``dataflex:`` block): ``domains`` (list of names, required),
``domain_key`` (dataset column, default ``domain``; ``data_source`` stays free
for verl's reward routing), ``update_step`` (default 1), ``warmup_step``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dataflex_core import Batch, ConfigError, InvalidOutputError
from dataflex_core.config import to_plain

from .mixture_sampler import DomainMixtureSampler
from .outputs import checked_scores, component_label, step_context

#: Keys of the ``dataflex:`` block that only ``mechanism: mix`` reads, with their defaults.
MIX_KEYS = {"domains": None, "domain_key": "domain", "update_step": 1}


@dataclass(frozen=True)
class MixSettings:
    domains: list[str]
    domain_key: str
    update_step: int


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


def dataset_domains(dataset: Any, key: str, domains: list[str]) -> torch.Tensor:
    """The domain id of every row of verl's train dataset (``RLHFDataset.dataframe[key]``)."""
    frame = getattr(dataset, "dataframe", None)
    columns = list(getattr(frame, "column_names", []) or [])
    if frame is None or key not in columns:
        raise ConfigError(
            f"dataflex.domain_key={key!r} is not a column of the train dataset (columns: {columns}); "
            "add a per-row domain column to the parquet files or set dataflex.domain_key to an existing one"
        )
    return domain_ids(frame[key], domains, f"train dataset column {key!r}")


def install_sampler(trainer: Any) -> DomainMixtureSampler:
    """Rebuild verl's train dataloader around a :class:`DomainMixtureSampler`; return the sampler.

    Called right after verl's ``_init_dataloader``: the loader keeps verl's
    dataset, batch size (``gen_batch_size`` or ``train_batch_size``), workers
    and collate function, and only the sampler changes.
    """
    from torchdata.stateful_dataloader import StatefulDataLoader

    settings: MixSettings = trainer.dataflex.mix
    mixer = trainer.dataflex.pipeline.actuator
    old = trainer.train_dataloader
    rows = dataset_domains(trainer.train_dataset, settings.domain_key, settings.domains)
    seed = trainer.config.data.get("seed", None)
    sampler = DomainMixtureSampler(
        rows,
        settings.domains,
        old.batch_size,
        initial_proportions(mixer, settings.domains),
        seed=0 if seed is None else seed,
        mixer=mixer,
    )
    trainer.train_dataloader = StatefulDataLoader(
        dataset=trainer.train_dataset,
        batch_size=old.batch_size,
        num_workers=old.num_workers,
        drop_last=True,
        collate_fn=old.collate_fn,
        sampler=sampler,
    )
    trainer.train_dataloader_it = None
    return sampler


def initial_proportions(mixer: Any, domains: list[str]) -> torch.Tensor:
    """The mixer's proportions before any update (uniform for mixers that do not say)."""
    current = getattr(mixer, "current_proportions", None)
    if callable(current):
        return torch.as_tensor(current(domains), dtype=torch.float64)
    return torch.full((len(domains),), 1.0 / len(domains), dtype=torch.float64)


def check_proportions(value: Any, num_domains: int, owner: str, step: int) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (num_domains,):
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise InvalidOutputError(
            f"{owner} returned proportions of shape {shape} at step {step}; expected ({num_domains},)"
        )
    p = value.detach().to(torch.float64).cpu()
    if not torch.isfinite(p).all() or (p < 0).any() or abs(float(p.sum()) - 1.0) > 1e-4:
        raise InvalidOutputError(
            f"{owner} returned proportions {p.tolist()} at step {step}; they must be finite, non-negative "
            "and sum to one"
        )
    return p


def mix_step(mounted: Any, sampler: DomainMixtureSampler, batch: Batch, step: int) -> dict:
    """Score the step's rollouts, feed the mixer, and hand new proportions to the sampler on update steps.

    ``batch`` holds the scorer's fields, ``response_mask``, ``is_padding`` and
    the ``domain_key`` column. Returns the step's ``dataflex/mix/...`` metrics.
    """
    start = time.perf_counter()
    settings: MixSettings = mounted.mix
    pipeline = mounted.pipeline
    domains = settings.domains
    padding = batch.batch["is_padding"]
    names = batch.non_tensor_batch[settings.domain_key]
    # Padding rows may carry any value; only real rows must name a configured domain.
    index = torch.zeros(len(batch), dtype=torch.long)
    index[~padding] = domain_ids(names[(~padding).numpy()], domains, f"queue field {settings.domain_key!r}")
    extra = {"domains": domains, "domain_index": index, "granularity": pipeline.scorer.granularity}
    ctx = {**step_context(mounted, step), **extra}
    metrics: dict[str, float] = {"dataflex/active": 1.0}
    real = ~padding
    for d, name in enumerate(domains):
        metrics[f"dataflex/mix/batch_fraction/{name}"] = float(((index == d) & real).sum()) / max(int(real.sum()), 1)
    updates = (step - pipeline.warmup_step) % settings.update_step == 0
    scores = checked_scores(mounted, batch, step, extra_ctx=extra)
    with torch.no_grad():
        if updates:
            proposed = pipeline.actuator.act(scores, batch, **ctx)
            owner = component_label(pipeline, "actuator")
            sampler.set_proportions(check_proportions(proposed, len(domains), owner, step))
        elif callable(getattr(pipeline.actuator, "observe", None)):
            pipeline.actuator.observe(scores, batch, **ctx)
    metrics["dataflex/mix/updated"] = 1.0 if updates else 0.0
    for d, name in enumerate(domains):
        metrics[f"dataflex/mix/proportion/{name}"] = float(sampler.proportions[d])
    metrics["dataflex/hook_time_s"] = time.perf_counter() - start
    return metrics
