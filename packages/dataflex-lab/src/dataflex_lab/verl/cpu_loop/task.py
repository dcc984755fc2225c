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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# verl loads this file by path (reward.custom_reward_function.path), outside its package: absolute imports only
from dataflex_lab import toy_task

#: ``data_source`` of every row (verl routes rewards and logs per-source metrics by it).
DATA_SOURCE = "dataflex_echo"
#: How many leading response characters the reward looks at (responses are a little longer).
SCORED_CHARS = toy_task.SCORED_CHARS


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """verl's custom-reward signature over :func:`dataflex_lab.toy_task.score`."""
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
