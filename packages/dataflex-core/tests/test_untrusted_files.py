"""Every file DataFlex reads is untrusted input (issue 58 item 1): a ledger file or a checkpoint's state that no run
writes is refused in one error naming the file, the field (row, column) and the value, never a raw exception or a
value that wraps on a cast (F1, F2, F8, F10)."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dataflex_core import ConfigError, Scorer, register_scorer
from dataflex_core.errors import DataFlexError
from dataflex_core.ledger import COLUMNS, PromptIds, PromptLedger
from dataflex_core.runner import mount_step
from dataflex_core.session import DataFlexSession, StagedGeneration
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport, TrainSampler
from dataflex_core.step.history import PromptHistory
from dataflex_core.step.prompt_sampler import CurriculumSampler
from dataflex_core.step.state import CHECKPOINT_STATE
from dataflex_lab.testing import PromptDataset, register_toy_components, run_staged_step

register_toy_components("untrustedtest")  # the sampler untrustedtest_proportional


@register_scorer("untrustedtest_flat")
class FlatScorer(Scorer):
    """pre_rollout: every candidate scores 1 (a curriculum that draws uniformly)."""

    timing = "pre_rollout"

    def score(self, batch, step_id, **ctx):
        return torch.ones(len(batch))


HOST = HostCapabilities(
    name="stagedhost",
    seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True), TrainSampler: SeamSupport(True)},
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
    timings=("pre_rollout", "post_reward", "post_advantage"), dataset_columns=True,
)  # fmt: skip
PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}


def ledger_session(pilot, population, batch_size=2):
    """A pilot keeping a ledger over ``population`` prompts (ids = rows, column ``index``)."""
    flex = DataFlexSession({**PILOT, "pilot": pilot, "prompt_key": "index"})
    flex.mount(HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.train_sampler(PromptDataset(range(population), {}), batch_size=batch_size, seed=0)
    flex.seam(StagedGeneration).prepare(population, batch_size=batch_size, seed=0)
    return flex


def run_step(flex, step, reward_of):
    return run_staged_step(flex, step, reward_of, padding=1)


IDS = [10, 11, 12]


def ledger_table(columns=None, header=None, ids=IDS):
    """A ledger file's table: every counter 0 unless ``columns`` gives it, the header a run writes (updated)."""
    fresh = PromptLedger(PromptIds(list(ids), "index"))
    head = {**fresh.header(), **(header or {})}
    arrays = {"id": pa.array(ids, pa.int64())}
    for name in COLUMNS:
        arrays[name] = pa.array(getattr(fresh, name).numpy())
    arrays.update(columns or {})
    return pa.table(arrays).replace_schema_metadata({"dataflex": json.dumps(head)})


def load(path):
    PromptLedger(PromptIds(IDS, "index")).load(path)


# -- F1: a count of 2^63 or more wraps on the cast ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "values", "shown"),
    [
        ("rollouts", pa.array([0.0, 1e19, 0.0]), "10000000000000000000"),
        ("times_sampled", pa.array([0, 2**64 - 1, 0], pa.uint64()), str(2**64 - 1)),
        ("tokens_generated", pa.array([0, 2**63, 0], pa.uint64()), str(2**63)),
    ],
)
def test_a_count_of_2_63_or_more_is_refused_before_the_cast(tmp_path, column, values, shown):
    path = tmp_path / "big.parquet"
    pq.write_table(ledger_table({column: values}), path)
    with pytest.raises(ConfigError, match=rf"big.parquet row 1 \(id 11\) has {column}={shown}: a count is at most"):
        load(path)


def test_a_checkpoint_ledger_count_of_int64_max_is_kept():
    state = PromptLedger(PromptIds(IDS, "index")).state_dict()
    state["tokens_generated"] = torch.tensor([0, 2**63 - 1, 0])  # the largest count: it needs no cast
    resumed = PromptLedger(PromptIds(IDS, "index"))
    resumed.load_state_dict(state, "the checkpoint /x")
    assert resumed.tokens_generated.tolist() == [0, 2**63 - 1, 0]


def test_a_checkpoint_ledger_count_of_1e19_is_refused_before_the_cast():
    state = PromptLedger(PromptIds(IDS, "index")).state_dict()
    state["rollouts"] = torch.tensor([0.0, 1e19, 0.0], dtype=torch.float64)
    with pytest.raises(ConfigError, match=r"row 1 \(id 11\) has rollouts=10000000000000000000"):
        PromptLedger(PromptIds(IDS, "index")).load_state_dict(state, "the checkpoint /x")


# -- F2: a ledger file's columns and header -----------------------------------------------------------------------


def _nested(depth):
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (lambda: ledger_table({"rollouts": pa.array(["1", "2", "3"])}), r"column 'rollouts' holds string values"),
        (lambda: ledger_table({"rollouts": pa.array([[1], [2], [3]])}), r"column 'rollouts' holds list<"),
        (
            lambda: ledger_table({"reward_sum": pa.array([Decimal("1.5")] * 3, pa.decimal128(5, 2))}),
            r"column 'reward_sum' holds decimal128",
        ),
        (
            lambda: ledger_table({"last_sampled_step": pa.array([0, 0, 0], pa.timestamp("s"))}),
            r"column 'last_sampled_step' holds timestamp",
        ),
        (lambda: ledger_table({"id": pa.array([1.0, 2.0, 3.0])}), r"column 'id' holds double values; ids are"),
        (lambda: ledger_table(header={"prompt_key": None}), r"header has prompt_key=None: the dataset column"),
        (lambda: ledger_table(header={"last_step": -7}), r"header has last_step=-7: .* whole number between 0"),
        (lambda: ledger_table(header={"last_step": 2.5}), r"header has last_step=2.5"),
        (lambda: ledger_table(header={"last_step": 10**30}), r"header has last_step=10{30}"),
        (lambda: ledger_table(header={"last_step": "junk"}), r"header has last_step='junk'"),
        (lambda: ledger_table(header={"prompts": "3"}), r"header has prompts='3'"),
    ],
)
def test_a_ledger_file_of_wrong_columns_or_header_is_refused_naming_the_file_and_field(tmp_path, table, message):
    path = tmp_path / "bad.parquet"
    pq.write_table(table(), path)
    with pytest.raises(ConfigError, match=rf"bad.parquet .*{message}"):
        load(path)


def test_a_header_without_prompt_key_a_list_header_and_a_deep_header_are_refused(tmp_path):
    head = PromptLedger(PromptIds(IDS, "index")).header()
    del head["prompt_key"]
    for name, metadata in [("nokey", json.dumps(head)), ("list", "[1, 2]"), ("deep", _nested(100_000))]:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(ledger_table().replace_schema_metadata({"dataflex": metadata}), path)
        with pytest.raises(ConfigError, match=rf"{name}.parquet"):
            load(path)


def test_a_duplicated_column_is_refused(tmp_path):
    table = ledger_table()
    table = table.append_column("rollouts", pa.array([0, 0, 0])).replace_schema_metadata(table.schema.metadata)
    path = tmp_path / "twice.parquet"
    pq.write_table(table, path)
    with pytest.raises(ConfigError, match=r"twice.parquet: expected the columns id and .* each once"):
        load(path)


@pytest.mark.parametrize("last_step", [-7, 2.5, 10**30, "junk", None])
def test_a_checkpoint_ledger_last_step_out_of_range_is_refused(last_step):
    state = PromptLedger(PromptIds(IDS, "index")).state_dict()
    state["last_step"] = last_step
    with pytest.raises(ConfigError, match=rf"/x's prompt history has last_step={last_step!r}"):
        PromptLedger(PromptIds(IDS, "index")).load_state_dict(state, "the checkpoint /x")


# -- F8, F10: the checkpoint's component state --------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt") / "global_step_1"
    flex = ledger_session({"prompts": 2, "rollouts": 2}, population=8)
    run_step(flex, 1, lambda prompt, k: float(k % 2))
    flex.save(folder, 1)
    return torch.load(folder / CHECKPOINT_STATE, weights_only=True)


def _set(role, key, value):
    return lambda components: components[role]["state"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("alter", "message"),
    [
        (lambda c: c["refill"]["state"].__setitem__("pass", c["refill"]["state"]["pass"][:3]),
         r"refill .*state\['pass'\] .* holds each of the dataset's 8 rows once, but has 3"),
        (_set("refill", "pass", torch.full((8,), -1)), r"state\['pass'\] .* holds row -1, outside the dataset's rows"),
        (_set("refill", "pass", torch.zeros(8, dtype=torch.long)), r"state\['pass'\] .* lists a row twice"),
        (_set("refill", "yielded", -5), r"refill .*state\['yielded'\] is -5: it lies between 0 and 8"),
        (_set("refill", "cursor", 9), r"state\['cursor'\] is 9"),
        (_set("refill", "generator", torch.zeros(3, dtype=torch.uint8)), r"state\['generator'\] .* 5056 bytes"),
        (_set("refill", "generator", torch.full((5056,), 255, dtype=torch.uint8)), r"refill .*RuntimeError"),
        (_set("refill", "block", [99]), r"state\['block'\] .* holds row 99"),
        (_set("compute", "refills", -5), r"compute .*state\['refills'\] is -5: it lies between 0 and"),
        (_set("compute", "rollouts_trained", 10**12), r"state\['rollouts_trained'\] is 10{12}: it is at most rollouts_g"),
        (_set("compute", "tokens_trained", 10**12), r"state\['tokens_trained'\] is 10{12}: it is at most tokens_gen"),
        (_set("compute", "refills", 10**12), r"state\['refills'\] is 10{12}: it is at most generation_rounds"),
        (_set("compute", "rollouts_generated", "x"), r"state\['rollouts_generated'\] is 'x': it is a whole number"),
        (_set("compute", "generation_rounds", 2**70), r"state\['generation_rounds'\] is 1180591620717411303424"),
    ],
)  # fmt: skip
def test_an_altered_pilot_state_is_refused_naming_the_file_field_and_value(tmp_path, saved, alter, message):
    payload = {**saved, "components": {r: {**e, "state": dict(e["state"])} for r, e in saved["components"].items()}}
    alter(payload["components"])
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    torch.save(payload, folder / CHECKPOINT_STATE)
    resumed = ledger_session({"prompts": 2, "rollouts": 2}, population=8)
    with pytest.raises(DataFlexError, match=rf"global_step_1/{CHECKPOINT_STATE}: dataflex .*{message}"):
        resumed.restore(folder)


def pilot_without_ledger(population):
    flex = DataFlexSession({**PILOT, "pilot": {"prompts": 2, "rollouts": 2}})
    flex.mount(HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.seam(StagedGeneration).prepare(population, batch_size=2, seed=0)
    return flex


@pytest.mark.parametrize("ledger", [True, False])
def test_a_pilot_checkpoint_over_a_dataset_of_another_size_is_refused_naming_both_sizes(tmp_path, ledger):
    folder = tmp_path / "global_step_1"
    make = (lambda n: ledger_session({"prompts": 2, "rollouts": 2}, population=n)) if ledger else pilot_without_ledger
    make(8).save(folder, 1)
    with pytest.raises(ConfigError, match=rf"{CHECKPOINT_STATE}: .* train dataset of 8 rows, but this run's has 10"):
        make(10).restore(folder)


def test_a_sound_pilot_state_resumes_the_same_refills(tmp_path, saved):
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    torch.save(saved, folder / CHECKPOINT_STATE)
    resumed = ledger_session({"prompts": 2, "rollouts": 2}, population=8)
    resumed.restore(folder)
    assert resumed.compute_totals.state_dict() == saved["components"]["compute"]["state"]


# -- the curriculum sampler's state ---------------------------------------------------------------------------------


def _curriculum_sampler(population=10):
    block = {"mechanism": "curriculum", "scorer": {"name": "untrustedtest_flat"},
             "actuator": {"name": "untrustedtest_proportional"}}  # fmt: skip
    step = mount_step(block, HOST, loss_unit="token")
    history = PromptHistory(PromptIds(list(range(population)), "index"), None)
    sampler = CurriculumSampler(step, history, {}, 4, seed=0, candidates=6)
    step.sampler = sampler
    return sampler


def test_a_curriculum_sampler_resumes_after_its_pass_wrapped():
    first = _curriculum_sampler()
    for _ in range(3):  # 6 + 6 + 6 candidates of 10 rows: the pass wraps
        first.next_block()
    state = first.state_dict()
    expected = first.next_block()
    resumed = _curriculum_sampler()
    resumed.load_state_dict(state)
    assert resumed.next_block() == expected


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("draws", torch.full((10,), -1), r"state\['draws'\] .* never negative"),
        ("pass", torch.arange(4), r"state\['pass'\] .* a pass has the dataset's 10 rows"),
        ("pass", torch.zeros(10, dtype=torch.long), r"state\['pass'\] .* lists a row twice"),
        ("cursor", 11, r"state\['cursor'\] is 11"),
        ("population", 12, r"saved over a train dataset of 12 rows, but this run's has 10"),
    ],
)
def test_an_altered_curriculum_sampler_state_is_refused_naming_the_field(key, value, message):
    sampler = _curriculum_sampler()
    sampler.next_block()
    with pytest.raises(DataFlexError, match=message):
        _curriculum_sampler().load_state_dict({**sampler.state_dict(), key: value})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("ids_utf8", torch.zeros(3, 3), r"prompt history cannot be read \(\w+Error"),
        ("last_step", 2.5, r"prompt history has last_step=2.5"),
        ("rollouts", torch.tensor([0.0, 1e19, 0.0], dtype=torch.float64), r"row 1 \(id 11\) has rollouts=1000"),
    ],
)
def test_a_checkpoint_folder_as_ledger_load_names_the_checkpoint(tmp_path, key, value, message):
    ledger = PromptLedger(PromptIds(IDS, "index"))
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    state = {**ledger.state_dict(), key: value}
    entry = {"kind": "ledger", "name": "prompt_ledger", "state": state}
    torch.save({"format": 1, "global_steps": 3, "components": {"ledger": entry}}, folder / CHECKPOINT_STATE)
    with pytest.raises(ConfigError, match=rf"the checkpoint .*global_step_3.*{message}"):
        PromptLedger(PromptIds(IDS, "index")).load(folder)


@pytest.mark.parametrize(
    "column", [torch.tensor([0, 2**63], dtype=torch.uint64), torch.tensor([0.0, 1e19], dtype=torch.float64)]
)
def test_a_checkpoint_ledger_column_of_another_dtype_is_refused_at_read(tmp_path, saved, column):
    payload = {**saved, "components": {r: {**e, "state": dict(e["state"])} for r, e in saved["components"].items()}}
    ledger = payload["components"]["ledger"]["state"]
    ledger["rollouts"] = torch.cat([column, torch.zeros(6, dtype=column.dtype)])
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    torch.save(payload, folder / CHECKPOINT_STATE)
    with pytest.raises(DataFlexError, match=rf"{CHECKPOINT_STATE}: ledger .*\['rollouts'\] is a torch.\w+ tensor"):
        ledger_session({"prompts": 2, "rollouts": 2}, population=8).restore(folder)
