"""docs/ledger.md: the recipe's commands run as printed, in both languages, and the warm start takes its ledger."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

DOCS = Path(__file__).resolve().parents[1]


def blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)


def fed_ledger(ids, steps: int, seed: int):
    """A ledger as a run over ``ids`` leaves it: 8 prompts a step, 4 rollouts each, some always or never solved."""
    from dataflex_core.ledger import PromptIds, PromptLedger

    ledger = PromptLedger(PromptIds(ids, "index"))
    generator = torch.Generator().manual_seed(seed)
    for step in range(1, steps + 1):
        rows = torch.randperm(len(ids), generator=generator)[:8].repeat_interleave(4)
        chance = (rows % 5).to(torch.float64) / 4  # rows 0, 5, ...: never solved; 4, 9, ...: always
        rewards = (torch.rand(len(rows), generator=generator, dtype=torch.float64) < chance).to(torch.float64)
        ledger.record(rows, rewards, step, tokens=torch.full((len(rows),), 5))
    return ledger


def checkpoint(folder: Path, ledger) -> None:
    """A checkpoint folder holding ``ledger`` in DataFlex's component state file, as a run saves it."""
    from dataflex_core.ledger_file import CHECKPOINT_STATE_FILE

    folder.mkdir(parents=True)
    torch.save({"components": {"sampler": {"kind": "ledger", "state": ledger.state_dict()}}},
               folder / CHECKPOINT_STATE_FILE)  # fmt: skip


def run_printed(block: str, capsys) -> list[str]:
    """Each line of a printed block, split as the user's shell splits it and run by the ``dataflex`` console
    script's ``main`` (in this process: a new one per line would spend seconds importing torch); their output."""
    from dataflex_core.cli import main

    outputs = []
    for line in block.strip().splitlines():
        words = shlex.split(line)
        assert words[:2] == ["dataflex", "ledger"], line
        capsys.readouterr()
        code = main(words[1:])
        printed = capsys.readouterr()
        assert code == 0, f"{line}\n{printed.err}"
        outputs.append(printed.out)
    return outputs


@pytest.mark.parametrize("page", ["ledger.md", "ledger.zh.md"])
def test_the_recipe_runs_as_printed(tmp_path, monkeypatch, capsys, page):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    yaml = pytest.importorskip("yaml")

    from dataflex_core.ledger import PromptIds, PromptLedger

    ids = np.arange(100, 140)
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"index": ids, "prompt": [f"q{i}" for i in ids.tolist()]}), tmp_path / "data/train.parquet")
    checkpoint(tmp_path / "run1/checkpoints/global_step_100", fed_ledger(ids, 12, seed=0))
    profile, select, compare = blocks(page, "bash")
    monkeypatch.chdir(tmp_path)

    shown, _ = run_printed(profile, capsys)
    assert "prompts keyed by 'index'" in shown and "solve rate (by the posterior)" in shown
    assert (tmp_path / "run1/ledger.png").stat().st_size > 10_000

    (report,) = run_printed(select, capsys)
    assert report.startswith("wrote data/train_next.parquet: kept ") and "solve_rate" in report
    kept = pq.read_table(tmp_path / "data/train_next.parquet")
    assert 0 < kept.num_rows < len(ids)

    # the warm start: the next run's ledger.load takes the kept prompts' ledger for the filtered dataset
    (config,) = blocks(page, "yaml")
    block = yaml.safe_load(config)["dataflex"]
    warm = PromptLedger(PromptIds(kept.column("index").to_numpy(), block["prompt_key"]))
    warm.load(tmp_path / block["ledger"]["load"])
    assert int(warm.times_sampled.sum()) > 0

    next_ids = kept.column("index").to_numpy()
    checkpoint(tmp_path / "run2/checkpoints/global_step_100", fed_ledger(next_ids, 6, seed=1))
    checkpoint(tmp_path / "run3/checkpoints/global_step_100", fed_ledger(next_ids, 6, seed=2))
    run_printed(compare, capsys)
    assert (tmp_path / "before_after.png").stat().st_size > 10_000
    merged = PromptLedger(PromptIds(next_ids, "index"))
    merged.load(tmp_path / "campaign.parquet")
    assert int(merged.rollouts.sum()) == 2 * 6 * 8 * 4
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
