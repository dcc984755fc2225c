"""TRL's real ``GRPOTrainer`` against hostile plugins and checkpoints: named, isolated, never training wrong.

The hostile-plugin suite (the testing kit's ``hostile_suite.HostileStepSuite``) runs on TRL's real
``_generate_and_score_completions``; the degenerate steps are TRL's own tests'
scenarios; saves, resumes and locks go through TRL's real training loop.

Plugins are real wheels pip installs into a throwaway site-packages put in
front of ``sys.path`` beside TRL (the testing kit's ``plugin_sites``); the lock covers them
and every plugin installed beside this test run. Planted code leaves a marker
file, so each test sees whether it ran.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl_testkit import generate

from dataflex_core import ConfigError, Reweighter, get_plugin_manager, register_reweighter
from dataflex_core.lock import PluginSetMismatch, lock_environment, write_lock
from dataflex_core.step.state import CHECKPOINT_STATE, ComponentStateError
from dataflex_lab.testing import hostile_suite, plugin_sites
from dataflex_lab.testing.hostile import HOSTILE, RunsCode, plant_bytecode
from dataflex_lab.testing.plugin_sites import forget_installed_plugins

SCORERS = """
from dataflex_core import Scorer, register_scorer

BEHAVIOUR = "locked"


@register_scorer("hs_trl_magnitude")
class MagnitudeScorer(Scorer):
    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return batch.batch["advantages"].abs().amax(-1)
"""
PACKAGE = {"hs_trl/__init__.py": "from . import scorers  # noqa: F401\n", "hs_trl/scorers.py": SCORERS}
EXITS = """
import argparse

ARGS = argparse.ArgumentParser(prog="my_scorer").parse_args()  # module level: the trainer's command line
"""
BLOCK = {"scorer": {"name": "hostkit_counter"}, "actuator": {"name": "trltest_proportional"}}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A throwaway site-packages in front of ``sys.path``, in a fresh process's state before and after."""
    with plugin_sites.pip_site(tmp_path, monkeypatch, alone=False) as pip_site:
        yield pip_site


def _saved_run(make_trainer) -> str:
    first = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    return os.path.join(first.args.output_dir, "checkpoint-2")


def test_a_crafted_state_file_in_a_shared_checkpoint_runs_no_code_on_resume(make_trainer, marker):
    folder = _saved_run(make_trainer)
    payload = {"format": 1, "global_steps": 2, "components": {"scorer": {"kind": "scorer",
               "name": "hostkit_counter", "state": {"rows": RunsCode(marker)}}}}  # fmt: skip
    torch.save(payload, os.path.join(folder, CHECKPOINT_STATE))
    resumed = make_trainer("dapo", BLOCK, max_steps=3, save_strategy="no")
    with pytest.raises(ComponentStateError, match="holds Python objects other than tensors and plain data"):
        resumed.train(resume_from_checkpoint=True)
    assert not marker.exists()


@pytest.mark.parametrize(("damage", "what"), [(b"", "is empty"), (None, "is truncated or corrupt")])
def test_a_damaged_state_file_stops_the_resume_with_one_line_naming_it(make_trainer, damage, what):
    folder = _saved_run(make_trainer)
    path = Path(folder, CHECKPOINT_STATE)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if damage is None else damage)
    resumed = make_trainer("dapo", BLOCK, max_steps=3, save_strategy="no")
    with pytest.raises(ComponentStateError) as info:
        resumed.train(resume_from_checkpoint=True)
    message = str(info.value)
    assert message.startswith(str(path)) and what in message and "\n" not in message
    assert f"delete {CHECKPOINT_STATE}" in message


def test_a_dataflex_block_written_as_a_list_is_a_config_error(make_trainer):
    with pytest.raises(ConfigError, match="the dataflex block must be a mapping"):
        make_trainer("dapo", [BLOCK["scorer"], BLOCK["actuator"]])


def test_a_plugin_exiting_at_import_does_not_take_the_trainer_down(make_trainer, site, monkeypatch):
    site.install("hs-exits", "0.1.0", "hs_exits", EXITS)
    monkeypatch.setattr(sys, "argv", ["train.py", "--output_dir", "runs/a"])
    trainer = make_trainer("dapo", {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}})
    assert trainer.dataflex.pipeline.scorer.name == "advantage_magnitude"
    (failure,) = [f for f in get_plugin_manager().failures if f.plugin.dist == "hs-exits"]
    assert "skipping plugin hs_exits (hs-exits==0.1.0): PluginLoadError: the plugin tried to exit" in failure.message


def test_under_a_lock_the_trainer_runs_the_locked_bytes_not_planted_bytecode_or_a_copy_on_sys_path(
    make_trainer, site, marker, tmp_path, monkeypatch
):
    site.install_files("hs-trl", "0.1.0", PACKAGE, {"hs_trl": "hs_trl"})
    lock = tmp_path / "dataflex_plugins.lock"
    write_lock(lock_environment(), lock)
    forget_installed_plugins()  # the job starts in a process of its own

    # a modified copy in the job's folder, ahead of site-packages ...
    job = tmp_path / "job"
    shutil.copytree(site.root / "hs_trl", job / "hs_trl", ignore=shutil.ignore_patterns("__pycache__"))
    (job / "hs_trl" / "scorers.py").write_text(HOSTILE + SCORERS)
    monkeypatch.setattr(sys, "path", [str(job), *sys.path])
    # ... and bytecode CPython would run for the installed scorers.py
    plant_bytecode(site.root / "hs_trl" / "scorers.py", HOSTILE + SCORERS)

    block = {"scorer": {"name": "hs_trl_magnitude"}, "actuator": {"name": "trltest_proportional"}}
    with pytest.raises(PluginSetMismatch, match="bytecode not compiled from its source"):
        make_trainer("dapo", {**block, "plugins": {"lock": str(lock)}})
    forget_installed_plugins()
    trainer = make_trainer("dapo", {**block, "plugins": {"lock": str(lock), "allow_drift": True}}, max_steps=1)
    trainer.train()
    scorer = sys.modules["hs_trl.scorers"]
    assert Path(scorer.__file__).is_relative_to(site.root) and scorer.BEHAVIOUR == "locked"
    assert any("dataflex/weight/max" in h for h in trainer.state.log_history)
    assert not marker.exists()


# -- the hostile-plugin suite on TRL's step path (core's hostile_suite) ----------------------------------


def _per_token(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return advantages.unsqueeze(1) * mask if advantages.dim() == 1 else advantages * mask


class TrlHostile(hostile_suite.HostileHarness):
    """A hostile block through TRL's ``_generate_and_score_completions``, against TRL's own step on the same batch."""

    def __init__(self, make_trainer, inputs) -> None:
        self.make_trainer, self.inputs = make_trainer, inputs

    def outcome(self, block):
        config = {"num_iterations": 2}  # TRL computes old_per_token_logps itself: the tensor a component could change
        plain = generate(self.make_trainer("dapo", **config), self.inputs)
        trainer = self.make_trainer("dapo", block, **config)
        try:
            output, error = generate(trainer, self.inputs), None
        except Exception as exc:  # noqa: BLE001 - the suite checks what it is
            output, error = None, exc
        metrics = {n: values[-1] for n, values in trainer._metrics["train"].items() if n.startswith("dataflex/")}
        if output is None:  # nothing reached TRL's loss
            return hostile_suite.StepOutcome(error, metrics, False, True, False)
        mask = plain["completion_mask"]
        return hostile_suite.StepOutcome(
            error,
            metrics,
            framework_loss=torch.allclose(
                _per_token(output["advantages"], mask), _per_token(plain["advantages"], mask)
            ),
            framework_tensors_unchanged=torch.equal(output["old_per_token_logps"], plain["old_per_token_logps"])
            and torch.equal(output["completion_mask"], mask),
            weights_have_graph=output["advantages"].requires_grad or output["advantages"].grad_fn is not None,
        )


class TestTrlAgainstHostilePlugins(hostile_suite.HostileStepSuite):
    @pytest.fixture
    def hostile(self, make_trainer, generation_inputs):
        return TrlHostile(make_trainer, generation_inputs)


# -- a step with no valid token: TRL's own degenerate-step tests, with DataFlex ---------------------------


CALLED: list[int] = []


@register_reweighter("trltest_counting")
class CountingReweighter(Reweighter):
    """Uniform weights, counting its calls: on a step with no valid token it must not be called."""

    def act(self, scores, batch, **ctx):
        CALLED.append(ctx["step_id"])
        return torch.ones(len(batch))


NO_TOKEN_BLOCK = {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "trltest_counting"}}


def _empty_steps(trainer) -> list[float]:
    return [h["dataflex/empty_step"] for h in trainer.state.log_history if "dataflex/empty_step" in h]


def test_a_reward_function_that_returns_none_for_a_whole_step_trains_through_as_in_trl(make_trainer, caplog):
    def always_none(completions, **kwargs):  # TRL's test_warning_raised_all_rewards_none
        return [None] * len(completions)

    CALLED.clear()
    trainer = make_trainer("dapo", NO_TOKEN_BLOCK, reward=always_none, max_steps=2)
    with caplog.at_level("WARNING", logger="trl.trainer.grpo_trainer"):
        trainer.train()
    assert "All reward functions returned None for the following kwargs:" in caplog.text
    assert _empty_steps(trainer) == [1.0, 1.0] and CALLED == []
    assert trainer.state.log_history[-1]["train_loss"] is not None


def test_every_completion_masked_as_truncated_trains_through_without_an_update_as_in_trl(make_trainer, tokenizer):
    # TRL's test_training_with_mask_truncated_completions_all_masked: no completion ends, so all are masked
    CALLED.clear()
    trainer = make_trainer(
        "dapo", NO_TOKEN_BLOCK, max_steps=2, mask_truncated_completions=True, learning_rate=0.1,
        generation_kwargs={"suppress_tokens": [tokenizer.eos_token_id, tokenizer.pad_token_id]},
    )  # fmt: skip
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    assert _empty_steps(trainer) == [1.0, 1.0] and CALLED == []
    assert trainer.state.log_history[-1]["train_loss"] is not None
    for name, param in trainer.model.named_parameters():
        assert torch.equal(before[name], param.detach()), f"{name} changed on steps without a valid token"


# -- component state that cannot be checkpointed ----------------------------------------------------------


def test_state_that_cannot_be_saved_stops_the_save_before_trl_writes_a_checkpoint(make_trainer):
    block = {"scorer": {"name": "hostile_unpicklable"}, "actuator": {"name": "trltest_proportional"}}
    trainer = make_trainer("dapo", block, max_steps=2, save_strategy="steps", save_steps=1)
    with pytest.raises(ComponentStateError, match=hostile_suite.UNPICKLABLE_MATCH):
        trainer.train()
    out = trainer.args.output_dir
    assert get_last_checkpoint(out) is None and not [p for p in os.listdir(out) if p.startswith("checkpoint-")]


def test_state_that_cannot_be_saved_from_the_start_stops_the_trainers_constructor(make_trainer):
    block = {"scorer": {"name": "hostile_unpicklable_at_mount"}, "actuator": {"name": "trltest_proportional"}}
    with pytest.raises(ComponentStateError, match=r"dataflex scorer hostile_unpicklable_at_mount: its state cannot"):
        make_trainer("dapo", block)


def test_a_failed_write_after_trls_files_leaves_no_checkpoint_trl_would_resume_from(make_trainer, monkeypatch):
    from dataflex_core.session import lifecycle

    def disk_full(folder, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lifecycle, "write_component_state", disk_full)  # the name the session writes through
    trainer = make_trainer("dapo", BLOCK, max_steps=1, save_strategy="steps", save_steps=1)
    with pytest.raises(OSError, match="No space left on device"):
        trainer.train()
    out = trainer.args.output_dir
    assert get_last_checkpoint(out) is None
    assert [p for p in os.listdir(out) if "checkpoint-" in p] == ["incomplete-checkpoint-1"]


def test_a_failed_write_under_save_total_limit_keeps_the_older_checkpoint_to_resume_from(make_trainer, monkeypatch):
    # transformers deletes older checkpoints at the end of its save; DataFlex holds that back until its files are
    # written, so a full disk at step 2 leaves checkpoint-1 (with DataFlex's files) for resume_from_checkpoint=True
    from dataflex_core.session import lifecycle

    write = lifecycle.write_component_state
    calls = []

    def full_on_second_save(folder, data):
        calls.append(folder)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        write(folder, data)

    monkeypatch.setattr(lifecycle, "write_component_state", full_on_second_save)
    trainer = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=1, save_total_limit=1)
    with pytest.raises(OSError, match="No space left on device"):
        trainer.train()
    out = trainer.args.output_dir
    assert sorted(p for p in os.listdir(out) if "checkpoint-" in p) == ["checkpoint-1", "incomplete-checkpoint-2"]
    last = get_last_checkpoint(out)
    assert os.path.basename(last) == "checkpoint-1"
    assert {"dataflex_plugins.lock", "dataflex_state.pt"} <= set(os.listdir(last))
    monkeypatch.setattr(lifecycle, "write_component_state", write)
    resumed = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=1, save_total_limit=1)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 2
    # the limit still holds once DataFlex's files are in, and the incomplete folder never counted as a checkpoint
    assert sorted(p for p in os.listdir(out) if "checkpoint-" in p) == ["checkpoint-2", "incomplete-checkpoint-2"]


def test_a_kill_between_trls_save_and_dataflexs_files_is_refused_naming_the_checkpoint_to_resume(make_trainer):
    # the newest checkpoint-N lacks DataFlex's files (the process stopped inside the save): resume_from_checkpoint=True
    # is refused, naming the newest checkpoint that has them; allow_missing_state resumes it on purpose
    trainer = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=1)
    trainer.train()
    out = trainer.args.output_dir
    os.remove(os.path.join(out, "checkpoint-2", "dataflex_state.pt"))
    resumed = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=1)
    with pytest.raises(ComponentStateError, match=r"checkpoint-2 has no dataflex_state\.pt.*the newest one with them is "
                       r".*checkpoint-1: pass it as resume_from_checkpoint"):  # fmt: skip
        resumed.train(resume_from_checkpoint=True)
    on_purpose = make_trainer("dapo", {**BLOCK, "plugins": {"allow_missing_state": True}}, max_steps=2)
    started = []

    class StartStep(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            started.append(state.global_step)

    on_purpose.add_callback(StartStep())
    on_purpose.train(resume_from_checkpoint=True)
    assert started == [2]  # resumed from checkpoint-2 (a fresh start begins at 0)


# -- security: a module planted in a locked package while the job runs -----------------------------------


def test_a_module_planted_in_a_locked_package_never_runs_at_step_time(make_trainer, site, marker, tmp_path):
    site.install_files("hs-lazy", "0.1.0", hostile_suite.LAZY_PLUGIN, {"hs_lazy": "hs_lazy"})
    lock = tmp_path / "dataflex_plugins.lock"
    write_lock(lock_environment(), lock)
    forget_installed_plugins()
    block = {**hostile_suite.LAZY_BLOCK, "on_invalid": "uniform", "plugins": {"lock": str(lock)}}
    trainer = make_trainer("dapo", block, max_steps=1)
    (site.root / hostile_suite.PLANTED).write_text(HOSTILE + hostile_suite.PLANTED_TAIL)  # while the job runs
    trainer.train()  # the lock refuses the planted file: the scorer's import fails
    assert not marker.exists()
    assert trainer.dataflex.uniform_fallbacks >= 1  # dataflex.on_invalid: uniform covers the failed call
