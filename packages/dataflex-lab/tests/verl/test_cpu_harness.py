"""The CPU harness's own parts, without Ray: verl's private seams still hold, overrides parse, sampling is keyed."""

from __future__ import annotations

import pytest
import torch

from dataflex_lab.verl.cpu_loop import model, verl_internals
from dataflex_lab.verl.cpu_loop.agent_loop import sample_key
from dataflex_lab.verl.cpu_loop.rollout import filter_logits, request_seed
from dataflex_lab.verl.cpu_loop.runner import RAY_GPUS, RunSpec, Workspace, dataflex_overrides, hydra_value, overrides


def test_verl_still_has_what_the_harness_reaches_into():
    """Fails loudly when a verl release moves a private part the harness relies on (see verl_internals.py)."""
    assert verl_internals.problems() == []


def test_dataflex_blocks_become_overrides_hydra_reads_back_exactly():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    block = {
        "mechanism": "mix",
        "domains": ["vowel", "consonant"],
        "scorer": {"name": "reward_difficulty", "params": {}},
        "actuator": {"name": "static", "params": {"proportions": [0.75, 0.25], "note": 'it\'s "quoted"', "x": None}},
        "warmup_step": 2,
    }
    parsed = OverridesParser.create().parse_overrides(dataflex_overrides(block))
    assert {o.key_or_group: o.value() for o in parsed} == {f"dataflex.{k}": v for k, v in block.items()}
    assert all(o.is_add() for o in parsed)  # '+': verl's config is in struct mode


def test_a_run_asks_verl_for_its_actor_workers_and_mini_batches(tmp_path):
    workspace = Workspace(
        tmp_path, *(tmp_path / name for name in ("model", "tokenizer", "t.parquet", "v.parquet", "a"))
    )
    default = overrides(RunSpec(), workspace)
    assert "trainer.n_gpus_per_node=1" in default
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=8" in default  # one mini-batch: the step's 8 prompts
    two = overrides(RunSpec(workers=2, mini_batch_prompts=3), workspace)
    assert "trainer.n_gpus_per_node=2" in two and "actor_rollout_ref.actor.ppo_mini_batch_size=3" in two
    with pytest.raises(ValueError, match=f"RunSpec.workers={RAY_GPUS + 1}: the harness's Ray offers 1 to {RAY_GPUS}"):
        overrides(RunSpec(workers=RAY_GPUS + 1), workspace)


def test_hydra_value_refuses_what_it_cannot_write():
    with pytest.raises(TypeError, match="set"):
        hydra_value({1, 2})


def test_sampling_is_keyed_by_step_prompt_and_sample_not_by_request_order():
    assert request_seed(0, "3:17:2") == request_seed(0, "3:17:2")
    assert len({request_seed(0, "3:17:2"), request_seed(0, "3:17:1"), request_seed(1, "3:17:2")}) == 3
    assert sample_key({"global_steps": 3, "index": 17, "session_id": 2, "raw_prompt": []}) == "3:17:2"
    with pytest.raises(KeyError, match="extra_info.index"):
        sample_key({"global_steps": 3, "session_id": 0})


def test_a_later_stage_of_a_prompt_on_the_legacy_line_draws_new_samples_not_the_earlier_ones():
    """verl's legacy trajectory info numbers a prompt's samples within one generate call; a pilot commit stage's
    rows carry how many rollouts their group already has, so its samples are numbered on from there."""
    from dataflex_lab.verl.cpu_loop.agent_loop import TRAJECTORY
    from dataflex_verl.legacy_rounds import ROLLOUT_OFFSET

    token = TRAJECTORY.set({"step": 3, "sample_index": 17, "rollout_n": 1})
    try:
        assert sample_key({"raw_prompt": []}) == "3:17:1"
        assert sample_key({"raw_prompt": [], ROLLOUT_OFFSET: 2}) == "3:17:3"
    finally:
        TRAJECTORY.reset(token)


def test_filter_logits_keeps_top_k_and_the_top_p_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isinf(filter_logits(logits, top_k=2, top_p=1.0)).tolist() == [False, False, True, True]
    # the nucleus of 0.7 needs the first two tokens (0.5 + 0.3); the rest are cut
    assert torch.isinf(filter_logits(logits, top_k=-1, top_p=0.7)).tolist() == [False, False, True, True]
    assert not torch.isinf(filter_logits(logits, top_k=-1, top_p=1.0)).any()


def test_the_tokenizer_is_what_verls_qwen_agent_loop_needs(tmp_path):
    tokenizer = model.build_tokenizer(tmp_path / "tokenizer")
    assert tokenizer.encode("\n", add_special_tokens=False) == [model.vocabulary()["\n"]]  # one token
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "c"}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["<|im_start|>", "user", "\n", "c", "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"]
    assert tokenizer.decode(tokenizer.encode("abc", add_special_tokens=False)) == "abc"
    assert tokenizer.eos_token == "<|im_end|>"


def test_the_reward_file_loads_by_path_as_verls_reward_workers_load_it():
    """verl imports ``reward.custom_reward_function.path`` as a file outside its package (no relative imports)."""
    from verl.utils.import_utils import load_extern_object

    from dataflex_lab.verl.cpu_loop import task

    compute_score = load_extern_object(module_path=task.__file__, object_name="compute_score")
    assert compute_score(task.DATA_SOURCE, "eeee", "e") == 1.0
    assert compute_score(task.DATA_SOURCE, "bbbb", "e") == 0.5  # letters of the task, not the echo


def test_one_step_off_runs_compose_verls_own_config_with_the_cpu_weight_sync(tmp_path):
    """The spec becomes verl's one-step-off config; the backend it names is the one its module registers."""
    import importlib

    from verl.checkpoint_engine import CheckpointEngineRegistry

    from dataflex_lab.verl.cpu_loop import runner

    files = [tmp_path / name for name in ("model", "tokenizer", "train.parquet", "val.parquet", "loops.yaml")]
    config = runner.compose(
        runner.RunSpec(entry_point="one_step_off", use_v1=False), runner.Workspace(tmp_path, *files)
    )
    assert config.algorithm.rollout_correction.bypass_mode is True  # from one_step_off_ppo_trainer.yaml
    assert config.actor_rollout_ref.hybrid_engine is False
    # the actor's worker and the rollout replica's each hold logical GPUs of their own, within what Ray advertises
    assert config.rollout.n_gpus_per_node == runner.ONE_STEP_OFF_ROLLOUT_GPUS == 1
    assert config.trainer.n_gpus_per_node + config.rollout.n_gpus_per_node <= runner.ONE_STEP_OFF_GPUS
    engine = config.actor_rollout_ref.rollout.checkpoint_engine
    importlib.import_module(engine.custom_backend_module)  # what verl's workers do with it
    assert CheckpointEngineRegistry.get(engine.backend).__name__ == "CpuMailboxCheckpointEngine"


def test_the_replay_buffer_polls_at_the_harness_pace_unless_a_caller_says_otherwise(monkeypatch):
    """verl's 2 s default made each V1 step's generation and each validation wait for the next whole 2 s."""
    from verl.trainer.ppo.v1 import replay_buffer

    monkeypatch.setattr(replay_buffer.ReplayBuffer, "__init__", replay_buffer.ReplayBuffer.__init__)  # restored
    args = ("sync", {}, None, "drop", {})
    assert replay_buffer.ReplayBuffer(*args).poll_interval == 2.0  # verl's own default, before the harness
    verl_internals.poll_replay_buffer_quickly(replay_buffer)
    verl_internals.poll_replay_buffer_quickly(replay_buffer)  # once only
    assert replay_buffer.ReplayBuffer(*args).poll_interval == verl_internals.REPLAY_POLL_S < 2.0
    assert (
        replay_buffer.ReplayBufferAsync("colocate_async", {}, None, "drop", {}).poll_interval
        == verl_internals.REPLAY_POLL_S
    )
    assert replay_buffer.ReplayBuffer(*args, poll_interval=1.5).poll_interval == 1.5  # a caller's value wins
    assert replay_buffer.ReplayBuffer(*args, 0.5).poll_interval == 0.5  # also given by position


def test_every_verl_process_that_imports_the_replay_buffer_gets_the_harness_pace():
    """Through the plugin verl imports (``VERL_USE_EXTERNAL_MODULES``), beside dataflex-verl's own import hook;
    the plugin itself does not import verl's V1 trainer package."""
    import os
    import subprocess
    import sys

    from dataflex_lab.verl.cpu_loop.runner import harness_env

    script = (
        "import sys, verl\n"
        "assert 'verl.trainer.ppo.v1' not in sys.modules\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer\n"
        "get_trainer_cls('dataflex_sync')\n"  # dataflex-verl's hook ran too
        "print(ReplayBuffer('sync', {}, None, 'drop', {}).poll_interval)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **harness_env()}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) == verl_internals.REPLAY_POLL_S


def test_processes_keep_their_compiled_bytecode_in_the_given_folder_where_the_environment_forbids_writing_it(
    tmp_path, monkeypatch
):
    """Each process of a run imports torch and verl; without bytecode each compiles them anew (``local_ray``'s
    ``bytecode_dir`` and :func:`~dataflex_lab.verl.cpu_loop.runner.bytecode_env`). Nothing lands beside the sources."""
    import os
    import subprocess
    import sys

    from dataflex_lab.verl.cpu_loop.runner import bytecode_env

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert bytecode_env(tmp_path / "cache") == {}  # bytecode is written beside the sources as usual
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "toy_module.py").write_text("VALUE = 1\n")
    env = {**os.environ, **bytecode_env(tmp_path / "cache"), "PYTHONPATH": str(sources)}
    for _ in range(2):  # the second process reads what the first wrote
        subprocess.run([sys.executable, "-c", "import toy_module"], env=env, check=True)
    compiled = tmp_path / "cache" / sources.relative_to("/") / f"toy_module.{sys.implementation.cache_tag}.pyc"
    assert list((tmp_path / "cache").rglob("toy_module*.pyc")) == [compiled]
    assert not list(sources.rglob("*.pyc"))
