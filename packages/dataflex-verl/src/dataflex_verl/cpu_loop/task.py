"""The toy verifiable task of the CPU runs in verl's dataset layout, with the rule reward verl loads by path.

The task itself (letters, domains, the score) is :mod:`dataflex_core.toy_task`,
shared with the TRL host's demo; this module renders it as verl's RLHF parquet
rows and provides :func:`compute_score`, which verl's reward workers load from
this file (``reward.custom_reward_function``). Each row carries a ``domain``
column (``vowel`` / ``consonant``) for ``mechanism: mix``, and
``extra_info.index``, which the harness's agent loop uses to key deterministic
sampling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataflex_core import toy_task

#: ``data_source`` of every row (verl routes rewards and logs per-source metrics by it).
DATA_SOURCE = "dataflex_echo"
#: How many leading response characters the reward looks at (responses are a little longer).
SCORED_CHARS = toy_task.SCORED_CHARS


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """verl's custom-reward signature over :func:`dataflex_core.toy_task.score`."""
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


def write_dataset(folder: str | Path, *, train_rows: int = 256, val_rows: int = 32, seed: int = 0) -> tuple[Path, Path]:
    """``(train.parquet, val.parquet)`` under ``folder``."""
    import pandas as pd

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, val = folder / "train.parquet", folder / "val.parquet"
    pd.DataFrame(rows(train_rows, seed)).to_parquet(train)
    pd.DataFrame(rows(val_rows, seed + 1)).to_parquet(val)
    return train, val
