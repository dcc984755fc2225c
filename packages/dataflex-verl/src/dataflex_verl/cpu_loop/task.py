"""The toy verifiable task of the CPU runs: echo the letter of the prompt, scored by a rule.

A prompt is one letter. The reward looks at the response's first
:data:`SCORED_CHARS` characters: half of it for answering in letters of the
task, half for repeating the prompt's letter (:func:`compute_score`). A random
tiny model starts near 0.25; under GRPO it learns the format within a few
steps and the echo more slowly: a curve that visibly rises in a few dozen
steps on a CPU, which is all a toy run is for (it shows the mechanics and a
direction, not a benchmark result).

Each row carries a ``domain`` column (``vowel`` / ``consonant``) for
``mechanism: mix``, and ``extra_info.index``, which the harness's agent loop
uses to key deterministic sampling. verl loads :func:`compute_score` from this
file by path (``reward.custom_reward_function``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

#: The letters prompts ask for, by domain.
DOMAINS = {"vowel": "ae", "consonant": "bcdfgh"}
#: How many leading response characters the reward looks at.
SCORED_CHARS = 4
#: ``data_source`` of every row (verl routes rewards and logs per-source metrics by it).
DATA_SOURCE = "dataflex_echo"


#: Every letter a prompt can ask for.
LETTERS = "".join(DOMAINS.values())


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """Half for answering in letters, half for the right letter, over the first :data:`SCORED_CHARS` characters.

    ``format`` is the share of those characters that are letters of the task, ``echo`` the share equal to
    ``ground_truth``; the score is their mean, in ``[0, 1]``. The format half is learnt within a few steps
    (it does not depend on the prompt), the echo half only by reading the prompt.
    """
    head = solution_str[:SCORED_CHARS]
    letters = sum(1 for char in head if char in LETTERS)
    echoed = sum(1 for char in head if char == ground_truth)
    return (letters + echoed) / (2 * SCORED_CHARS)


def rows(count: int, seed: int, domain_share: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """``count`` dataset rows in verl's RLHF layout; domains split by ``domain_share`` (default: equal)."""
    share = domain_share or {name: 1 / len(DOMAINS) for name in DOMAINS}
    rng = random.Random(seed)
    names = list(DOMAINS)
    counts = [round(count * share.get(name, 0.0)) for name in names]
    counts[-1] = count - sum(counts[:-1])
    out = []
    for name, n in zip(names, counts):
        for _ in range(n):
            letter = rng.choice(DOMAINS[name])
            out.append(
                {
                    "data_source": DATA_SOURCE,
                    "prompt": [{"role": "user", "content": letter}],
                    "ability": "echo",
                    "reward_model": {"style": "rule", "ground_truth": letter},
                    "domain": name,
                    "extra_info": {"index": 0},
                }
            )
    rng.shuffle(out)
    for index, row in enumerate(out):
        row["extra_info"]["index"] = index
    return out


def write_dataset(folder: str | Path, *, train_rows: int = 256, val_rows: int = 32, seed: int = 0) -> tuple[Path, Path]:
    """``(train.parquet, val.parquet)`` under ``folder``."""
    import pandas as pd

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, val = folder / "train.parquet", folder / "val.parquet"
    pd.DataFrame(rows(train_rows, seed)).to_parquet(train)
    pd.DataFrame(rows(val_rows, seed + 1)).to_parquet(val)
    return train, val
