"""Where verl picks prompts: its train dataloader, rebuilt around a sampler DataFlex draws from.

``mechanism: mix`` and ``mechanism: curriculum`` change *which* prompts verl
rolls out, so both replace the sampler of verl's train dataloader right after
verl's ``_init_dataloader``. The loader keeps verl's dataset, batch size
(``gen_batch_size`` or ``train_batch_size``), workers and collate function;
torchdata's ``StatefulDataLoader`` saves the sampler's ``state_dict`` in
verl's ``data.pt`` and restores it on resume.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import Sampler


def replace_train_sampler(trainer: Any, sampler: Sampler) -> None:
    """Rebuild ``trainer.train_dataloader`` with ``sampler``; verl draws its next prompts through it."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    old = trainer.train_dataloader
    trainer.train_dataloader = StatefulDataLoader(
        dataset=trainer.train_dataset,
        batch_size=old.batch_size,
        num_workers=old.num_workers,
        drop_last=True,
        collate_fn=old.collate_fn,
        sampler=sampler,
    )
    trainer.train_dataloader_it = None


def data_seed(trainer: Any) -> int:
    """``data.seed`` of the verl config (0 when unset): the seed of a DataFlex train sampler."""
    seed = trainer.config.data.get("seed", None)
    return 0 if seed is None else int(seed)
