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
