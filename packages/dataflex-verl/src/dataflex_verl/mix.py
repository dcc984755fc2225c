"""``mechanism: mix`` in verl: the train dataloader's sampler draws prompts by the mixer's proportions.

The mechanism itself is core's (:mod:`dataflex_core.step.mix`): after verl
has computed advantages, the scorer runs on the step's rollouts, each row is
mapped to its domain through the dataset column ``domain_key`` (carried into
the queue with the prompt), and the mixer observes that step; every
``update_step`` steps (from ``warmup_step`` on) it proposes new proportions.
This module puts core's :class:`~dataflex_core.step.DomainMixtureSampler`
where verl picks prompts: the train dataloader, rebuilt around it. No loss
weights are written: the loss is verl's own.

Config (``dataflex:`` block): ``domains`` (list of names, required),
``domain_key`` (dataset column, default ``domain``; ``data_source`` stays free
for verl's reward routing), ``update_step`` (default 1), ``warmup_step``.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import ConfigError
from dataflex_core.step import DomainMixtureSampler, MixSettings, domain_ids, initial_proportions

from .sampling import data_seed, replace_train_sampler


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

    Called right after verl's ``_init_dataloader`` (see :mod:`dataflex_verl.sampling`).
    """
    settings: MixSettings = trainer.dataflex.mix
    mixer = trainer.dataflex.pipeline.actuator
    rows = dataset_domains(trainer.train_dataset, settings.domain_key, settings.domains)
    sampler = DomainMixtureSampler(
        rows,
        settings.domains,
        trainer.train_dataloader.batch_size,
        initial_proportions(mixer, settings.domains),
        seed=data_seed(trainer),
        mixer=mixer,
    )
    replace_train_sampler(trainer, sampler)
    return sampler
