"""The per-prompt ledger: counts and reward summaries per prompt, checkpoint state, the exported file, warm starts."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from dataflex_core import ConfigError, Scorer, ledger_file, register_scorer
from dataflex_core.ledger import COLUMNS, PromptIds, PromptLedger, read_ledger
from dataflex_core.session import DataFlexSession
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport, TrainSampler
from dataflex_core.step.history import PromptHistory
from dataflex_lab.testing import PromptDataset, register_toy_components, rows_batch

register_toy_components("ledgertest")  # the sampler ledgertest_proportional


@register_scorer("ledgertest_prompt_count")
class RolloutCountScorer(Scorer):
    """Prompts rolled out less score higher (reads the ledger's ``rollouts``)."""

    timing = "pre_rollout"
    requires = ["rollouts"]

    def score(self, batch, step_id, **ctx):
        return 1.0 / (1.0 + batch.batch["rollouts"].to(torch.float32))


HOST = HostCapabilities(
    name="testhost",
    seams={LossWeights: SeamSupport(True), TrainSampler: SeamSupport(True)},
    timings=("pre_rollout", "post_reward", "post_advantage"),
    fields={"rm_scores": FieldSupport(True)},
)


def fed_ledger(ids=(10, 11, 12)) -> PromptLedger:
    """Two steps: prompt 10 rewards 1, 0 then 1, 1 (one filtered); prompt 12 rewards 0.5, 0.5 (no signal)."""
    ledger = PromptLedger(PromptIds(list(ids), "index"))
    row = {prompt: int(r) for prompt, r in zip(ids, ledger.ids.rows(list(ids)))}
    ledger.record(
        torch.tensor([row[10], row[10], row[12], row[12]]), torch.tensor([1.0, 0.0, 0.5, 0.5]), 1,
        tokens=torch.tensor([3, 4, 2, 2]),
    )  # fmt: skip
    ledger.record(
        torch.tensor([row[10], row[10]]), torch.tensor([1.0, 1.0]), 2,
        tokens=torch.tensor([5, 1]), trained=torch.tensor([True, False]),
    )  # fmt: skip
    return ledger


def by_id(ledger: PromptLedger) -> dict:
    return {
        prompt: {column: getattr(ledger, column)[row].item() for column in COLUMNS}
        for row, prompt in enumerate(ledger.ids.values.tolist())
    }


def test_each_prompt_counts_its_rollouts_tokens_and_rewards():
    ledger = fed_ledger()
    got = by_id(ledger)
    assert got[10]["rollouts"] == 4 and got[10]["rollouts_trained"] == 3 and got[10]["rollouts_filtered"] == 1
    assert got[10]["tokens_generated"] == 13 and got[10]["times_sampled"] == 2 and got[10]["last_sampled_step"] == 2
    assert got[12]["uniform_reward_steps"] == 1 and got[10]["uniform_reward_steps"] == 1  # step 2's 1, 1
    assert got[10]["uniform_reward_streak"] == 1 and got[12]["uniform_reward_streak"] == 1
    assert got[11] == {column: fresh for column, (_, fresh) in COLUMNS.items()}  # never rolled out
    mean, variance = ledger.reward_moments()
    assert mean.tolist() == pytest.approx([0.75, 0.0, 0.5]) and variance.tolist() == pytest.approx([0.1875, 0, 0])
    alpha, beta = ledger.solve_rate_posterior()
    assert alpha.tolist() == pytest.approx([4.0, 1.0, 2.0]) and beta.tolist() == pytest.approx([2.0, 1.0, 2.0])


def test_the_uniform_reward_streak_counts_the_latest_visits_in_a_row():
    ledger = PromptLedger(PromptIds([7], "index"))
    streaks = []
    for step, rewards in enumerate([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 1.0]], start=1):
        ledger.record(torch.zeros(2, dtype=torch.long), torch.tensor(rewards), step)
        streaks.append(int(ledger.uniform_reward_streak[0]))
    assert streaks == [1, 2, 0, 1]  # a step with signal resets it
    assert int(ledger.uniform_reward_steps[0]) == 3


def write_records(ledger: PromptLedger, path, edit) -> None:
    """The ledger's export with its records changed by ``edit`` (a list of per-prompt dicts), as a file an
    offline pass could write."""
    records = [
        {"id": prompt_id, **{c: float(getattr(ledger, c)[row]) for c in COLUMNS}}
        for row, prompt_id in enumerate(ledger.ids.values.tolist())
    ]
    edit(records)
    ids = np.asarray([record["id"] for record in records], dtype=np.int64)
    columns = {c: torch.tensor([record[c] for record in records], dtype=torch.float64) for c in COLUMNS}
    ledger_file.write_parquet(str(path), ids, columns, ledger.header())


def test_the_exported_file_warm_starts_a_ledger_over_the_same_prompts_in_another_order(tmp_path):
    ledger = fed_ledger()
    path = tmp_path / "ledger.parquet"
    ledger.export(path)
    header, records = read_ledger(path)
    assert header["format"] == "dataflex-ledger" and header["prompts"] == 3 and header["last_step"] == 2
    assert [record["id"] for record in records] == [10, 11, 12]
    assert pq.read_table(path).column("rollouts").to_pylist() == [4, 0, 2]  # plain Parquet any reader takes
    other_host = PromptLedger(PromptIds([12, 10, 11], "index"))  # another host's row order
    other_host.load(path)
    assert by_id(other_host) == by_id(ledger) and other_host.last_step == 2 and other_host.seen_fraction == 2 / 3


def test_parquet_round_trips_over_many_row_groups_with_string_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_file, "ROW_GROUP", 7)
    ids = [f"p-{i}-é" for i in range(50)]
    ledger = PromptLedger(PromptIds(ids, "uid"))
    rows = torch.arange(50).repeat(3)
    ledger.record(rows, torch.rand(150, dtype=torch.float64), 4, tokens=torch.arange(150))
    ledger.export(tmp_path / "l.parquet")
    assert pq.ParquetFile(tmp_path / "l.parquet").num_row_groups == 8
    other = PromptLedger(PromptIds(list(reversed(ids)), "uid"))
    other.load(tmp_path / "l.parquet")
    assert by_id(other) == by_id(ledger)
    state = ledger.state_dict()  # ids as one uint8 tensor, never a list
    assert isinstance(state["ids_utf8"], torch.Tensor) and not any(isinstance(v, list) for v in state.values())
    resumed = PromptLedger(PromptIds(ids, "uid"))
    resumed.load_state_dict(state)
    assert by_id(resumed) == by_id(ledger) and resumed.seen_fraction == 1.0


def test_a_file_refused_in_a_later_row_group_leaves_the_ledger_fresh_not_half_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_file, "ROW_GROUP", 7)
    monkeypatch.setattr(ledger_file, "READ_BATCH", 5)
    ledger = PromptLedger(PromptIds(torch.arange(50), "index"))
    ledger.record(torch.arange(50), torch.ones(50), 3, tokens=torch.ones(50, dtype=torch.long))
    ledger.rollouts_filtered[40] = -2
    ledger.export(tmp_path / "l.parquet")
    warm = PromptLedger(PromptIds(torch.arange(50), "index"))
    with pytest.raises(ConfigError, match=r"l.parquet row 40 \(id 40\) has rollouts_filtered=-2"):
        warm.load(tmp_path / "l.parquet")
    assert int(warm.rollouts.sum()) == 0 and int(warm.times_sampled.sum()) == 0  # rows 0-39 were read and written first
    assert bool((warm.last_sampled_step == -1).all()) and warm.last_step == 0 and warm.seen_fraction == 0.0


def test_a_million_prompt_ledger_round_trips_through_checkpoint_state_and_parquet(tmp_path):
    n = 1_000_000
    ids = PromptIds(torch.arange(n) * 3 + 7, "index")
    ledger = PromptLedger(ids)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, n, (200_000,), generator=g)
    ledger.record(rows, torch.rand(len(rows), generator=g, dtype=torch.float64), 1, tokens=torch.ones_like(rows))
    state = ledger.state_dict()
    assert isinstance(state["ids"], torch.Tensor) and state["ids"].dtype == torch.int64
    torch.save(state, tmp_path / "s.pt")
    resumed = PromptLedger(ids)
    resumed.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    ledger.export(tmp_path / "l.parquet")
    imported = PromptLedger(ids)
    imported.load(tmp_path / "l.parquet")
    for column in COLUMNS:
        assert torch.equal(getattr(resumed, column), getattr(ledger, column)), column
        assert torch.equal(getattr(imported, column), getattr(ledger, column)), column
    assert imported.seen_fraction == resumed.seen_fraction == float((ledger.times_sampled > 0).sum()) / n


def test_a_resumed_ledger_never_shares_the_columns_it_was_given(tmp_path):
    ids = PromptIds(torch.arange(5), "index")
    ledger = PromptLedger(ids)
    ledger.record(torch.tensor([0, 1, 1]), torch.tensor([1.0, 0.0, 1.0]), step=1)
    passed = PromptLedger(ids)
    passed.load_state_dict(ledger.state_dict())  # state_dict does not copy: the load does
    ledger.record(torch.tensor([1, 2]), torch.tensor([1.0, 1.0]), step=2)
    assert passed.rollouts.tolist() == [1, 2, 0, 0, 0] and ledger.rollouts.tolist() == [1, 3, 1, 0, 0]
    passed.record(torch.tensor([4]), torch.tensor([0.0]), step=2)
    assert ledger.rollouts[4] == 0
    torch.save(ledger.state_dict(), tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)
    resumed = PromptLedger(ids)
    resumed.load_state_dict(state)
    resumed.record(torch.tensor([3]), torch.tensor([1.0]), step=3)
    assert state["rollouts"][3] == 0 and resumed.rollouts[3] == 1
    assert torch.equal(resumed.successes[:3], ledger.successes[:3])


def test_more_successes_than_rollouts_is_named_by_row_past_the_first_check_block(monkeypatch):
    monkeypatch.setattr(ledger_file, "CHECK_BLOCK", 4)
    ledger = PromptLedger(PromptIds(torch.arange(10), "index"))
    ledger.record(torch.arange(10), torch.ones(10), step=1)
    state = ledger.state_dict()
    state["successes"] = state["successes"].clone()
    state["successes"][9] = 3.0
    with pytest.raises(ConfigError, match=r"row 9 \(id 9\) has successes=3.0: .* one success per rollout"):
        PromptLedger(PromptIds(torch.arange(10), "index")).load_state_dict(state)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r[2].update(id=10), r"row 2 lists prompt id 10 a second time"),
        (lambda r: r[0].update(rollouts=-1), r"row 0 \(id 10\) has rollouts=-1: it is at least 0"),
        (lambda r: r[0].update(times_sampled=2.7), r"row 0 \(id 10\) has times_sampled=2.7: .* whole number"),
        (lambda r: r[1].update(successes=float("inf")), r"row 1 \(id 11\) has successes=inf: .* finite"),
        (lambda r: r[1].update(reward_sum=float("nan")), r"row 1 \(id 11\) has reward_sum=nan: .* finite"),
        (lambda r: r[0].update(successes=9.0), r"row 0 \(id 10\) has successes=9.0: .* one success per rollout"),
        (lambda r: r.pop(), r"has 2 rows but its header lists 3 prompts: it is truncated"),
    ],
)
def test_a_warm_start_refuses_values_no_run_records_naming_file_row_column_and_value(tmp_path, edit, message):
    path = tmp_path / "ledger.parquet"
    write_records(fed_ledger(), path, edit)
    with pytest.raises(ConfigError, match=f"ledger .*ledger.parquet .*{message}"):
        PromptLedger(PromptIds([10, 11, 12], "index")).load(path)


def test_a_truncated_parquet_file_and_a_bad_parquet_value_are_named(tmp_path):
    path = tmp_path / "l.parquet"
    ledger = fed_ledger()
    ledger.export(path)
    data = path.read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match=r"cut.parquet is not a readable Parquet file .* truncated"):
        PromptLedger(PromptIds([10, 11, 12], "index")).load(tmp_path / "cut.parquet")
    ledger.rollouts_trained[2] = -3
    ledger.export(path)
    with pytest.raises(ConfigError, match=r"l.parquet row 2 \(id 12\) has rollouts_trained=-3"):
        PromptLedger(PromptIds([10, 11, 12], "index")).load(path)


@pytest.mark.parametrize(
    ("ids", "key", "message"),
    [
        ([10, 11, 13], "index", r"recorded for another dataset: 3 prompts .* digest"),
        ([10, 11], "index", "recorded for another dataset: 3 prompts"),
        ([10, 11, 12], "problem_id", "keys its prompts by 'index', but this run keys them by .*'problem_id'"),
    ],
)
def test_a_ledger_of_another_dataset_is_refused(tmp_path, ids, key, message):
    path = tmp_path / "ledger.parquet"
    fed_ledger().export(path)
    with pytest.raises(ConfigError, match=message):
        PromptLedger(PromptIds(ids, key)).load(path)


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"format": "dataflex-ledger", "version": 1, "prompt_key": "index", "prompts": 1}\n')
    with pytest.raises(ConfigError, match="ledger .*ledger.jsonl is not a Parquet file; give a ledger session.export"):
        PromptLedger(PromptIds([10], "index")).load(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"dataflex.ledger.load='.*nowhere.jsonl' does not exist"):
        PromptLedger(PromptIds([10], "index")).load(tmp_path / "nowhere.jsonl")


def test_a_history_saved_before_the_ledger_counters_existed_resumes():
    state = fed_ledger().state_dict()
    old = {k: v for k, v in state.items() if k not in ("rollouts_trained", "rollouts_filtered", "tokens_generated")}
    old = {k: v for k, v in old.items() if k not in ("reward_sq_sum", "uniform_reward_steps")}
    resumed = PromptHistory(PromptIds([10, 11, 12], "index"))
    resumed.load_state_dict(old)
    assert resumed.rollouts.tolist() == [4, 0, 2] and resumed.rollouts_trained.tolist() == [0, 0, 0]
    assert (PromptHistory.kind, PromptHistory.name) == ("history", "prompt_history")  # old checkpoints' role


def curriculum_session(**extra) -> DataFlexSession:
    block = {
        "mechanism": "curriculum", "scorer": {"name": "ledgertest_prompt_count"},
        "actuator": {"name": "ledgertest_proportional"}, **extra,
    }  # fmt: skip
    session = DataFlexSession(block)
    session.mount(HOST, loss_unit="token")
    session.train_sampler(PromptDataset([10, 11, 12]), batch_size=2, seed=0)
    return session


def test_a_curriculum_starts_from_dataflex_ledger_load_and_a_checkpoint_holds_it_once(tmp_path):
    path = tmp_path / "profiled.parquet"
    fed_ledger().export(path)
    session = curriculum_session(ledger={"load": str(path)})
    assert session.ledger.rollouts.tolist() == [4, 0, 2]
    batch = rows_batch([2, 2], width=2, rewards=[1.0, 0.0], columns={"index": [11, 11]})
    session.run(batch, 3)
    session.save(tmp_path / "global_step_3", 3)
    assert not [p.name for p in (tmp_path / "global_step_3").iterdir() if "ledger" in p.name]  # no second copy
    resumed = PromptLedger(PromptIds([10, 11, 12], "index"))
    resumed.load(tmp_path / "global_step_3")  # a checkpoint folder: the ledger in its component state
    assert resumed.rollouts.tolist() == [4, 2, 2] and resumed.last_step == 3
    assert session.export_ledger(tmp_path / "export.parquet")
    exported = PromptLedger(PromptIds([10, 11, 12], "index"))
    exported.load(tmp_path / "export.parquet")
    assert exported.rollouts.tolist() == [4, 2, 2]


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), float("-inf"), "1"])
def test_success_threshold_must_be_finite_at_mount(threshold):
    with pytest.raises(ConfigError, match=r"dataflex.success_threshold must be a finite number .* got"):
        curriculum_session(success_threshold=threshold)


def test_ledger_settings_are_checked():
    with pytest.raises(ConfigError, match=r"dataflex.ledger has unknown keys \['path'\]; it accepts \['load'\]"):
        curriculum_session(ledger={"path": "x"})
    with pytest.raises(ConfigError, match="dataflex.ledger is read only by mechanism: curriculum"):
        DataFlexSession(
            {
                "scorer": {"name": "ledgertest_reward"},
                "actuator": {"name": "ledgertest_proportional"},
                "ledger": {"load": "x"},
            }
        ).mount(HOST, loss_unit="token")
