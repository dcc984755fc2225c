"""The toy verifiable task of the CPU runs in verl's dataset layout, with the rule reward verl loads by path.

The task itself (letters, domains, the score) is :mod:`dataflex_lab.toy_task`,
shared with the TRL host's demo; this module renders it as verl's RLHF parquet
rows and provides :func:`compute_score`, which verl's reward workers load from
this file (``reward.custom_reward_function``). Each row carries a ``domain``
column (``vowel`` / ``consonant``) for ``mechanism: mix``, and
``extra_info.index``, which the harness's agent loop uses to key deterministic
sampling and ``mechanism: curriculum`` uses as the prompt id (verl copies it
into ``index``). The ``mixed`` task (:func:`dataflex_lab.toy_task.mixed_prompts`)
adds prompts that are already solved or unsolvable, for the curriculum; its
rows carry their ``kind``, and its validation set holds echo prompts only (the
skill the other prompts cannot teach).

A task family (:mod:`dataflex_lab.task_families`) is written the same way
(:func:`write_family_dataset`): its train prompts (every kind) as the train
set, its held-out split as the validation set, ``data_source``
``dataflex_<family>`` (:func:`family_source`), from which :func:`compute_score`
picks the family's binary rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

# verl loads this file by path (reward.custom_reward_function.path), outside its package: absolute imports only
from dataflex_lab import task_families, toy_task

#: ``data_source`` of every row (verl routes rewards and logs per-source metrics by it).
DATA_SOURCE = "dataflex_echo"
#: How many leading response characters the reward looks at (responses are a little longer).
SCORED_CHARS = toy_task.SCORED_CHARS


#: ``data_source`` of a task family's rows: this prefix and the family's name.
FAMILY_SOURCE_PREFIX = "dataflex_"


def family_source(family: str) -> str:
    """The ``data_source`` of a task family's rows, e.g. ``dataflex_repeat``."""
    return FAMILY_SOURCE_PREFIX + family


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """verl's custom-reward signature: a task family's binary rule for its rows, else
    :func:`dataflex_lab.toy_task.score`."""
    family = task_families.FAMILIES.get(data_source.removeprefix(FAMILY_SOURCE_PREFIX))
    if family is not None and data_source.startswith(FAMILY_SOURCE_PREFIX):
        return family.reward(solution_str, ground_truth)
    return toy_task.score(solution_str, ground_truth)


def rows(count: int, seed: int, domain_share: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """``count`` dataset rows in verl's RLHF layout; domains split by ``domain_share`` (default: equal)."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": letter}],
            "ability": "echo",
            "reward_model": {"style": "rule", "ground_truth": letter},
            "domain": domain,
            "extra_info": {"index": index},
        }
        for index, (letter, domain) in enumerate(toy_task.prompts(count, seed, domain_share))
    ]


def mixed_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` rows of the mixed-difficulty task (echo, solved and unsolvable prompts), each with its ``kind``."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": prompt.text}],
            "ability": "echo",
            "reward_model": {"style": "rule", "ground_truth": prompt.answer},
            "domain": prompt.domain,
            "kind": prompt.kind,
            "extra_info": {"index": index},
        }
        for index, prompt in enumerate(toy_task.mixed_prompts(count, seed))
    ]


def family_rows(prompts: Sequence[task_families.TaskPrompt], family: str) -> list[dict[str, Any]]:
    """A task family's prompts as verl RLHF rows, each with its ``kind`` and ``difficulty`` (-1 for the constant
    prompts) and ``extra_info.index`` (the prompt id)."""
    return [
        {
            "data_source": family_source(family),
            "prompt": [{"role": "user", "content": prompt.text}],
            "ability": family,
            "reward_model": {"style": "rule", "ground_truth": prompt.answer},
            "kind": prompt.kind,
            "difficulty": -1 if prompt.difficulty is None else prompt.difficulty,
            "extra_info": {"index": index},
        }
        for index, prompt in enumerate(prompts)
    ]


def write_family_dataset(folder: str | Path, splits: task_families.TaskSplits) -> tuple[Path, Path]:
    """``(train.parquet, val.parquet)`` under ``folder``: the family's train prompts and its held-out split."""
    import pandas as pd

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, val = folder / "train.parquet", folder / "val.parquet"
    pd.DataFrame(family_rows(splits.train, splits.family)).to_parquet(train)
    pd.DataFrame(family_rows(splits.held_out, splits.family)).to_parquet(val)
    return train, val


#: The datasets the harness can write: ``echo`` (the plain task) and ``mixed`` (for the curriculum).
TASKS = ("echo", "mixed")


def write_dataset(
    folder: str | Path, *, train_rows: int = 256, val_rows: int = 32, seed: int = 0, task: str = "echo"
) -> tuple[Path, Path]:
    """``(train.parquet, val.parquet)`` under ``folder``; the ``mixed`` task validates on echo prompts only."""
    import pandas as pd

    if task not in TASKS:
        raise ValueError(f"task {task!r} is not one of {', '.join(TASKS)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, val = folder / "train.parquet", folder / "val.parquet"
    pd.DataFrame(rows(train_rows, seed) if task == "echo" else mixed_rows(train_rows, seed)).to_parquet(train)
    pd.DataFrame(rows(val_rows, seed + 1)).to_parquet(val)
    return train, val
