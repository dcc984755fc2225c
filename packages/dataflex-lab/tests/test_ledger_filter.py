"""``dataflex ledger filter``: the rows a pandas reference keeps, in the dataset's schema and order, streamed."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataflex_core.cli import main
from dataflex_lab.ledger import KeepRule, LedgerError, filter_dataset
from dataflex_lab.testing.ledgers import PROMPTS, ids, recorded, step_batches

pd = pytest.importorskip("pandas")

RULES = [
    KeepRule(),
    KeepRule(solve_rate=(0.05, 0.95)),
    KeepRule(solve_rate=(0.2, 0.8), min_samples=2, keep_unseen=False),
    KeepRule(min_samples=3),
]


def dataset(folder, verl: bool = False, shuffled: bool = True) -> str:
    """The train dataset: rows shuffled against the ledger's order, a list column and schema metadata (to be
    kept as they are), row groups of 7 rows; verl's layout keeps the id in ``extra_info``."""
    values = ids().values
    order = np.random.default_rng(0).permutation(PROMPTS) if shuffled else np.arange(PROMPTS)
    columns = {
        "prompt": [[{"role": "user", "content": f"q{i}"}] for i in values[order].tolist()],
        "answer": [str(i % 10) for i in values[order].tolist()],
    }
    if verl:
        columns["extra_info"] = [{"index": int(i), "split": "train"} for i in values[order].tolist()]
    else:
        columns["index"] = values[order]
    table = pa.table(columns).replace_schema_metadata({"origin": "test"})
    path = str(folder / "train.parquet")
    pq.write_table(table, path, row_group_size=7)
    return path


def reference(ledger, frame, rule: KeepRule, key: str = "index") -> pd.DataFrame:
    """The rule in pandas: the ledger as a frame joined to the dataset by id."""
    book = pd.DataFrame({"id": ledger.ids.values, **{c: getattr(ledger, c).numpy() for c in
                         ("times_sampled", "rollouts", "successes")}})  # fmt: skip
    ids_of_rows = frame[key] if key in frame else frame["extra_info"].map(lambda e: e["index"])
    joined = book.set_index("id").loc[ids_of_rows.to_numpy()].reset_index(drop=True)
    seen = joined.times_sampled > 0
    keep = seen | rule.keep_unseen
    keep &= ~seen | (joined.times_sampled >= rule.min_samples)
    if rule.solve_rate is not None:
        rate = joined.successes / joined.rollouts.clip(lower=1)
        keep &= ~seen | rate.between(*rule.solve_rate)
    return frame[keep.to_numpy()].reset_index(drop=True)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("verl", [False, True])
def test_the_output_is_the_pandas_reference(tmp_path, rule, verl):
    ledger = recorded(step_batches(10))
    ledger.export(tmp_path / "ledger.parquet")
    source = dataset(tmp_path, verl=verl)
    out = tmp_path / "kept.parquet"
    report = filter_dataset(tmp_path / "ledger.parquet", source, out, rule, rows_per_batch=5)
    written = pq.read_table(out)
    assert written.schema == pq.read_schema(source) and written.schema.metadata[b"origin"] == b"test"
    expected = reference(ledger, pd.read_parquet(source), rule)
    pd.testing.assert_frame_equal(written.to_pandas(), expected)
    assert report.kept == len(expected) and report.rows == PROMPTS
    assert sum(report.dropped.values()) == PROMPTS - len(expected)


def test_the_cli_says_what_each_rule_dropped(tmp_path, capsys):
    ledger = recorded(step_batches(10))
    ledger.export(tmp_path / "ledger.parquet")
    source, out = dataset(tmp_path), tmp_path / "kept.parquet"
    seen = ledger.times_sampled > 0
    arguments = ["ledger", "filter", str(tmp_path / "ledger.parquet"), "--dataset", source, "-o", str(out)]
    assert main([*arguments, "--drop-unseen", "--min-samples", "2", "--solve-rate", "0.05:0.95", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dropped"]["unseen"] == int((~seen).sum())
    assert report["dropped"]["min_samples"] == int((seen & (ledger.times_sampled < 2)).sum())
    assert report["kept"] == pq.read_metadata(out).num_rows
    assert main([*arguments]) == 0
    assert capsys.readouterr().out == (
        f"wrote {out}: kept {PROMPTS} of {PROMPTS} rows; dropped by rule: unseen 0, min_samples 0, solve_rate 0\n"
    )
    with pytest.raises(SystemExit):  # argparse's usage error
        main([*arguments, "--solve-rate", "0.9"])
    assert "expected LOW:HIGH" in capsys.readouterr().err
    assert main([*arguments, "--solve-rate", "0.9:0.1"]) == 2
    assert "needs 0 <= LOW <= HIGH <= 1, got 0.9:0.1" in capsys.readouterr().err


def test_a_checkpoint_folder_filters_the_same_rows(tmp_path):
    import torch

    from dataflex_core.ledger_file import CHECKPOINT_STATE_FILE

    ledger = recorded(step_batches(10))
    ledger.export(tmp_path / "ledger.parquet")
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    torch.save({"components": {"sampler": {"state": ledger.state_dict()}}}, folder / CHECKPOINT_STATE_FILE)
    source = dataset(tmp_path, shuffled=False)  # a checkpoint's ledger is in the dataset's row order
    rule = KeepRule(solve_rate=(0.05, 0.95))
    filter_dataset(tmp_path / "ledger.parquet", source, tmp_path / "a.parquet", rule)
    filter_dataset(folder, source, tmp_path / "b.parquet", rule)
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


def test_a_ledger_of_another_dataset_is_refused(tmp_path, capsys):
    recorded(step_batches(3)).export(tmp_path / "ledger.parquet")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"index": np.arange(PROMPTS), "prompt": ["p"] * PROMPTS}), other)
    out = tmp_path / "kept.parquet"
    assert main(["ledger", "filter", str(tmp_path / "ledger.parquet"), "--dataset", str(other), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"the ledger {tmp_path / 'ledger.parquet'} was recorded for another dataset" in err
    assert not out.exists()
    with pytest.raises(LedgerError, match="has no column 'answer_id'"):
        filter_dataset(tmp_path / "ledger.parquet", other, out, KeepRule(), prompt_key="answer_id")


def test_the_filter_at_scale_reports_its_time_and_peak_memory(tmp_path):
    """The bench's ``scale`` figure at 10M prompts, here at 50k: the rule's rows kept, memory measured."""
    from dataflex_lab.ledger.scale import measure_filter

    result = measure_filter(50_000, str(tmp_path))
    assert result["rows"] == 50_000 and 0 < result["kept"] < 50_000
    assert result["dropped"]["unseen"] > 10_000  # the never-seen third
    assert result["peak_rss_mib"] > 0 and result["seconds"] > 0
    assert pq.read_metadata(tmp_path / "kept.parquet").num_rows == result["kept"]


@pytest.mark.parametrize("from_checkpoint", [False, True])
def test_the_kept_prompts_ledger_warm_starts_a_run_on_the_filtered_dataset(tmp_path, from_checkpoint):
    import torch

    from dataflex_core.errors import ConfigError
    from dataflex_core.ledger import PromptIds, PromptLedger
    from dataflex_core.ledger_file import CHECKPOINT_STATE_FILE, COLUMNS

    whole = recorded(step_batches(10))
    source = tmp_path / "ledger.parquet"
    whole.export(source)
    if from_checkpoint:
        source = tmp_path / "checkpoint"
        source.mkdir()
        torch.save({"components": {"sampler": {"state": whole.state_dict()}}}, source / CHECKPOINT_STATE_FILE)
    rule = KeepRule(solve_rate=(0.05, 0.95))
    out, kept_ledger = tmp_path / "kept.parquet", tmp_path / "kept_ledger.parquet"
    filter_dataset(source, dataset(tmp_path, shuffled=not from_checkpoint), out, rule, ledger_output=kept_ledger)
    kept_ids = pq.read_table(out).column("index").to_numpy()
    warm = PromptLedger(PromptIds(kept_ids, "index"))
    warm.load(kept_ledger)  # what dataflex.ledger.load does for a run on the filtered dataset
    rows = whole.ids.rows(kept_ids)
    for name in COLUMNS:
        assert torch.equal(getattr(warm, name), getattr(whole, name)[rows]), name
    assert warm.last_step == whole.last_step
    with pytest.raises(ConfigError, match="recorded for another dataset"):
        PromptLedger(PromptIds(kept_ids, "index")).load(tmp_path / "ledger.parquet")  # the whole one is refused


def test_outputs_over_an_input_or_an_empty_kept_ledger_are_refused_before_writing(tmp_path):
    recorded(step_batches(10)).export(tmp_path / "ledger.parquet")
    source = dataset(tmp_path)
    before = pq.read_table(source)
    with pytest.raises(LedgerError, match="is an input of the filter"):
        filter_dataset(tmp_path / "ledger.parquet", source, source, KeepRule())
    nothing = KeepRule(solve_rate=(0.0, 0.0), min_samples=1000, keep_unseen=False)
    out = tmp_path / "kept.parquet"
    with pytest.raises(LedgerError, match="the rules keep no prompt"):
        filter_dataset(
            tmp_path / "ledger.parquet", source, out, nothing, ledger_output=tmp_path / "kept_ledger.parquet"
        )
    assert not out.exists() and pq.read_table(source).equals(before)
    assert filter_dataset(tmp_path / "ledger.parquet", source, out, nothing).kept == 0
    assert pq.read_table(out).num_rows == 0 and pq.read_schema(out) == pq.read_schema(source)
