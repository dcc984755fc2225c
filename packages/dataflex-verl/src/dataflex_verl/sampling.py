"""Where verl picks prompts: its train dataloader, rebuilt around the sampler DataFlex's session builds.

``mechanism: mix`` and ``mechanism: curriculum`` change *which* prompts verl
rolls out, so right after verl's ``_init_dataloader`` the session builds their
sampler from verl's train dataset (:class:`VerlTrainDataset`) and the
dataloader is rebuilt around it. The loader keeps verl's dataset, batch size
(``gen_batch_size`` or ``train_batch_size``), workers and collate function;
torchdata's ``StatefulDataLoader`` saves the sampler's ``state_dict`` in
verl's ``data.pt`` and restores it on resume.

A curriculum keys its history by ``dataflex.prompt_key``: verl's
``RLHFDataset`` copies ``extra_info.index`` into every rollout as ``index``
(the default key), so that column exists for DataFlex too, derived the way
verl derives it; any column of the parquet files works as well, since verl
carries every dataset column into the rollouts.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import Sampler

#: The key verl's ``RLHFDataset`` derives from each row's ``extra_info`` (``extra_info.get("index", 0)``).
VERL_INDEX = "index"


class VerlTrainDataset:
    """verl's train dataset (``RLHFDataset.dataframe``) as the session's train sampler reads it."""

    def __init__(self, dataset: Any) -> None:
        self.frame = getattr(dataset, "dataframe", None)
        self._columns = list(getattr(self.frame, "column_names", []) or [])

    def __len__(self) -> int:
        return 0 if self.frame is None else len(self.frame)

    def columns(self) -> list[str]:
        derived = [VERL_INDEX] if VERL_INDEX not in self._columns and "extra_info" in self._columns else []
        return [*self._columns, *derived]

    def column(self, name: str) -> list[Any]:
        if name in self._columns:
            return list(self.frame[name])
        # what RLHFDataset.__getitem__ puts in row_dict["index"]
        return [(info or {}).get(VERL_INDEX, 0) for info in self.frame["extra_info"]]


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
