"""``mechanism: curriculum`` in verl: the train dataloader's sampler draws prompts by the curriculum.

The mechanism is core's (:mod:`dataflex_core.step.curriculum`): a
:class:`~dataflex_core.step.CurriculumSampler` replaces the sampler of verl's
train dataloader (:mod:`dataflex_verl.sampling`) and scores the candidate
prompts with the ``pre_rollout`` scorer each time verl fetches a batch of
prompts (``_fetch_one_gen_batch``, at the start of each step in the sync
trainer); after verl has computed the step's advantages, the mixin feeds the
prompt history from the step's ``rm_scores``, keyed by the dataset column
``dataflex.prompt_key``. verl's ``RLHFDataset`` copies ``extra_info.index`` into
every rollout as ``index`` (the default key); a column of the parquet files
works too, since verl carries every dataset column into the rollouts.

The history is checkpointed with the components' state
(:mod:`dataflex_verl.checkpoint`); the sampler's generator and position go
into verl's ``data.pt`` with the dataloader.
"""

from __future__ import annotations

from typing import Any

from dataflex_core import ConfigError
from dataflex_core.step import CurriculumSampler, PromptHistory, PromptIds, candidate_columns

from .sampling import data_seed, replace_train_sampler

#: The key verl's ``RLHFDataset`` derives from each row's ``extra_info`` (``extra_info.get("index", 0)``).
VERL_INDEX = "index"


def _frame(dataset: Any) -> tuple[Any, list[str]]:
    frame = getattr(dataset, "dataframe", None)
    return frame, list(getattr(frame, "column_names", []) or [])


def dataset_ids(dataset: Any, key: str) -> list[Any]:
    """The prompt id of every row of verl's train dataset: column ``key``, or verl's ``extra_info.index``."""
    frame, columns = _frame(dataset)
    if frame is not None and key in columns:
        return list(frame[key])
    if frame is not None and key == VERL_INDEX and "extra_info" in columns:
        # what RLHFDataset.__getitem__ puts in row_dict["index"]
        return [(info or {}).get(VERL_INDEX, 0) for info in frame["extra_info"]]
    raise ConfigError(
        f"dataflex.prompt_key={key!r} is not a column of the train dataset (columns: {columns}), and the rows "
        "have no extra_info.index to derive it from; add a unique extra_info.index (or a column) per row, or set "
        "dataflex.prompt_key to a column that identifies each prompt"
    )


def dataset_column(dataset: Any, name: str) -> list[Any]:
    """Column ``name`` of verl's train dataset, which a curriculum component reads for every candidate."""
    frame, columns = _frame(dataset)
    if frame is None or name not in columns:
        raise ConfigError(
            f"a curriculum component reads the dataset column {name!r}, but the train dataset has columns "
            f"{columns}; add it to the parquet files or configure components that do not read it"
        )
    return list(frame[name])


def install_sampler(trainer: Any) -> CurriculumSampler:
    """Rebuild verl's train dataloader around a :class:`CurriculumSampler`; return the sampler.

    Called right after verl's ``_init_dataloader``, before any checkpoint is loaded.
    """
    settings = trainer.dataflex.curriculum
    dataset = trainer.train_dataset
    ids = PromptIds(dataset_ids(dataset, settings.prompt_key), settings.prompt_key)
    history = PromptHistory(ids, settings.success_threshold)
    columns = {name: dataset_column(dataset, name) for name in candidate_columns(trainer.dataflex.pipeline)}
    sampler = CurriculumSampler(
        trainer.dataflex_step,
        history,
        columns,
        trainer.train_dataloader.batch_size,
        seed=data_seed(trainer),
        candidates=settings.candidates,
    )
    replace_train_sampler(trainer, sampler)
    return sampler
