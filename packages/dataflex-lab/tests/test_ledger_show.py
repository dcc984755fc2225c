"""``dataflex ledger show``: the counts, the solve-rate buckets, ``--json``, and a bad ledger refused by name."""

from __future__ import annotations

import json
import math
import os

import pyarrow.parquet as pq
import pytest
import torch

from dataflex_core.cli import main
from dataflex_lab.ledger import load_ledger, summarize
from dataflex_lab.testing.ledgers import GROUP, PROMPTS, ids, recorded, step_batches


@pytest.fixture
def ledger_file(tmp_path):
    ledger = recorded(step_batches(12))
    path = tmp_path / "ledger.parquet"
    ledger.export(path)
    return ledger, str(path)


def test_show_counts_what_the_ledger_recorded(ledger_file):
    ledger, path = ledger_file
    report = summarize(load_ledger(path))
    seen = ledger.times_sampled > 0
    assert report["prompts"] == PROMPTS and report["seen"] == int(seen.sum()) and report["group_size"] == GROUP
    assert report["totals"] == {
        "rollouts_generated": int(ledger.rollouts.sum()),
        "rollouts_trained": int(ledger.rollouts_trained.sum()),
        "rollouts_filtered": int(ledger.rollouts_filtered.sum()),
        "tokens_generated": int(ledger.tokens_generated.sum()),
        "zero_variance_rollouts": GROUP * int(ledger.uniform_reward_steps.sum()),
    }
    # by the last streak: the latest visit had one reward, and it was 1 (0)
    streak = ledger.uniform_reward_streak > 0
    always = seen & streak & (ledger.last_success_rate == 1)
    never = seen & streak & (ledger.last_success_rate == 0)
    buckets = report["by_last_streak"]
    assert buckets["always solved"]["prompts"] == int(always.sum()) > 0
    assert buckets["never solved"]["prompts"] == int(never.sum()) > 0
    assert sum(b["rollouts"] for b in buckets.values()) == report["totals"]["rollouts_generated"]
    assert sum(b["prompts"] for b in report["by_posterior"].values()) == report["seen"]
    histogram = {b["solve_rate"]: b for b in report["solve_rate_histogram"]}
    rate = ledger.successes / ledger.rollouts.clamp(min=1)
    assert histogram["1"]["prompts"] == int((seen & (rate == 1)).sum())
    assert histogram["0"]["prompts"] == int((seen & (rate == 0)).sum())
    costly = report["costliest_without_signal"]
    assert costly and costly[0]["zero_variance_rollouts"] == GROUP * int(ledger.uniform_reward_steps.max())


def test_the_posterior_bucket_is_the_likelier_outcome_of_the_next_group():
    """Beta(1 + s, 1 + r - s): after 4 of 4, the next 4 all succeed with probability 5/9; after 2 of 4, neither."""
    ledger = recorded([])
    rows = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    ledger.record(rows, torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0, 0.0, 1.0, 0.0]), 1)
    report = summarize(ledger)
    assert math.isclose(5 / 9, math.exp(math.lgamma(9) - math.lgamma(5) + math.lgamma(6) - math.lgamma(10)))
    assert {name: b["prompts"] for name, b in report["by_posterior"].items()} == {
        "never solved": 1, "between": 1, "always solved": 1,
    }  # fmt: skip


def test_show_prints_the_report_and_json_for_scripts(ledger_file, capsys):
    ledger, path = ledger_file
    assert main(["ledger", "show", path]) == 0
    text = capsys.readouterr().out
    assert f"ledger {path}: {PROMPTS} prompts keyed by 'index'" in text
    assert "solve rate (by the posterior)" in text and "the prompts that cost most without signal:" in text
    assert main(["ledger", "show", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["rollouts_generated"] == int(ledger.rollouts.sum())


def test_a_checkpoint_folder_is_read_from_its_state_file(ledger_file, tmp_path, capsys):
    from dataflex_core.ledger_file import CHECKPOINT_STATE_FILE

    ledger, _ = ledger_file
    folder = tmp_path / "global_step_12"
    folder.mkdir()
    torch.save({"components": {"sampler": {"state": ledger.state_dict()}}}, folder / CHECKPOINT_STATE_FILE)
    assert main(["ledger", "show", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["rollouts_trained"] == int(ledger.rollouts_trained.sum())


def train_file(folder) -> str:
    """The train dataset of ``dataflex_lab.testing.ledgers``: its ids in column ``index``, a prompt each."""
    import pyarrow as pa

    path = str(folder / "train.parquet")
    values = ids().values
    pq.write_table(pa.table({"index": values, "prompt": [f"prompt {i}" for i in values.tolist()]}), path)
    return path


def bad_copy(path: str, out: str, column: str, row: int, value) -> None:
    """``path`` rewritten with ``column[row] = value``, header kept."""
    import pyarrow as pa

    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[row] = value
    index = table.schema.get_field_index(column)
    table = table.set_column(index, table.schema.field(column), pa.array(values, type=table.schema.field(column).type))
    pq.write_table(table, out)


@pytest.mark.parametrize("command", ["show", "plot", "merge", "filter"])
def test_a_bad_ledger_is_refused_naming_file_row_column_and_value(ledger_file, tmp_path, capsys, command):
    _, path = ledger_file
    bad = str(tmp_path / "bad.parquet")
    bad_copy(path, bad, "rollouts_trained", 5, -3)
    arguments = {
        "show": [bad],
        "plot": [bad, "-o", str(tmp_path / "p.png")],
        "merge": [path, bad, "-o", str(tmp_path / "m.parquet")],
        "filter": [bad, "--dataset", train_file(tmp_path), "-o", str(tmp_path / "f.parquet")],
    }[command]
    assert main(["ledger", command, *arguments]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dataflex ledger {command}: the ledger {bad} row 5 (id 1035) has rollouts_trained=-3")
    assert not [name for name in os.listdir(tmp_path) if name[0] in "pmf"]  # nothing written


def test_files_that_are_no_ledger_are_refused_by_name(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert main(["ledger", "show", str(text)]) == 2
    assert f"{text} is not a Parquet file" in capsys.readouterr().err
    assert main(["ledger", "show", str(tmp_path / "missing.parquet")]) == 2
    assert "missing.parquet does not exist" in capsys.readouterr().err
    assert main(["ledger", "show", str(tmp_path)]) == 2  # a folder without a state file
    assert "dataflex_state.pt" in capsys.readouterr().err


def test_an_id_listed_twice_is_named_with_its_rows(ledger_file, tmp_path, capsys):
    _, path = ledger_file
    bad = str(tmp_path / "twice.parquet")
    bad_copy(path, bad, "id", 9, 1000 + 7 * 2)
    assert main(["ledger", "show", bad]) == 2
    assert "row 9 (column id) lists prompt id 1014 a second time (first at row 2)" in capsys.readouterr().err


def test_string_prompt_ids_are_shown_filtered_and_merged(tmp_path, capsys):
    """Ids of a string column (TRL datasets often key prompts by a text id) through every command."""
    import numpy as np
    import pyarrow as pa

    from dataflex_core.ledger import PromptIds, PromptLedger

    names = np.array([f"problem-{i:03d}" for i in range(PROMPTS)])
    halves = []
    for batches in (step_batches(6)[:3], step_batches(6)[3:]):
        ledger = PromptLedger(PromptIds(names, "problem_id"))
        for step, (rows, rewards) in enumerate(batches, start=1 + 3 * len(halves)):
            ledger.record(rows, rewards, step)
        halves.append(ledger)
        ledger.export(tmp_path / f"half{len(halves)}.parquet")
    first, second = (str(tmp_path / f"half{k}.parquet") for k in (1, 2))
    assert main(["ledger", "merge", first, second, "-o", str(tmp_path / "all.parquet")]) == 0
    assert main(["ledger", "show", str(tmp_path / "all.parquet"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["rollouts_generated"] == 6 * 8 * GROUP
    assert all(c["id"].startswith("problem-") for c in report["costliest_without_signal"])
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"problem_id": names[::-1].tolist(), "prompt": ["p"] * PROMPTS}), train)
    out = tmp_path / "kept.parquet"
    command = ["ledger", "filter", str(tmp_path / "all.parquet"), "--dataset", str(train), "-o", str(out)]
    assert main([*command, "--drop-unseen"]) == 0
    assert pq.read_metadata(out).num_rows == report["seen"]
