"""The harness's alternation of DataFlex's step on both trainer lines (the ``fit`` benches' paired measure)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dataflex_lab.verl.cpu_loop import alternate


class VerlTrainer:
    def _compute_advantage(self, batch, metrics):
        return ("verl", batch)


def fake_module():
    """A module like ``dataflex_verl.mixin``: the mixin before verl's trainer in each DataFlex trainer's MRO."""

    class DataFlexTrainerMixin:
        def _compute_advantage(self, batch, metrics):
            metrics["dataflex/hook_time_s"] = 0.001
            return ("dataflex", batch)

    class Trainer(DataFlexTrainerMixin, VerlTrainer):
        pass

    return SimpleNamespace(DataFlexTrainerMixin=DataFlexTrainerMixin, Trainer=Trainer)


@pytest.mark.parametrize(("runs_on", "dataflex_steps"), [("odd", {1, 3}), ("even", {2, 4})])
def test_dataflex_runs_on_the_steps_of_its_parity_and_verls_step_alone_on_the_others(runs_on, dataflex_steps):
    module = fake_module()
    alternate.alternate(module, runs_on)
    alternate.alternate(module, runs_on)  # a second install does not wrap twice
    trainer = module.Trainer()
    for step in (1, 2, 3, 4):
        trainer.global_steps = step
        metrics: dict = {}
        who, batch = trainer._compute_advantage("keys", metrics)
        on = step in dataflex_steps
        assert (who, batch) == ("dataflex" if on else "verl", "keys")
        assert metrics[alternate.ON_METRIC] == float(on) and ("dataflex/hook_time_s" in metrics) == on


def fake_legacy_module():
    """A module like ``dataflex_verl.legacy``: the mixin's step runs on verl's batch after verl's advantage."""

    class DataFlexLegacyMixin:
        def __init__(self):
            self.dataflex_metrics: dict = {}

        def _dataflex_after_advantage(self, data, estimate):
            self.dataflex_metrics["dataflex/hook_time_s"] = 0.001
            return {**data, "rollout_is_weights": estimate(data)}

    return SimpleNamespace(DataFlexLegacyMixin=DataFlexLegacyMixin)


@pytest.mark.parametrize(("runs_on", "dataflex_steps"), [("odd", {1, 3}), ("even", {2, 4})])
def test_on_the_legacy_line_verls_batch_goes_on_unchanged_on_the_other_steps(runs_on, dataflex_steps):
    module = fake_legacy_module()
    alternate.alternate_legacy(module, runs_on)
    alternate.alternate_legacy(module, runs_on)  # a second install does not wrap twice
    trainer = module.DataFlexLegacyMixin()
    for step in (1, 2, 3, 4):
        trainer.global_steps, trainer.dataflex_metrics = step, {}
        batch = {"advantages": step}
        out = trainer._dataflex_after_advantage(batch, lambda data: "weights")
        on = step in dataflex_steps
        assert out == ({**batch, "rollout_is_weights": "weights"} if on else batch)
        assert trainer.dataflex_metrics[alternate.ON_METRIC] == float(on)
        assert ("dataflex/hook_time_s" in trainer.dataflex_metrics) == on


def fake_stages_module():
    """A module like ``dataflex_verl.legacy_stages``: at fit's pull, the stages prepare the rollouts of the prompts
    they chose and hand fit those prompts."""

    class PilotStagesRounds:
        def __init__(self, trainer):
            self.trainer, self.prepared = trainer, []

        def step(self, batch_dict):
            self.prepared.append(self.trainer.global_steps)
            return {"prompts": "chosen by the stages"}

    return SimpleNamespace(PilotStagesRounds=PilotStagesRounds)


@pytest.mark.parametrize(("runs_on", "staged_steps"), [("odd", [1, 3]), ("even", [2, 4])])
def test_on_the_other_steps_fit_gets_its_pulled_prompts_to_generate_itself(runs_on, staged_steps):
    module = fake_stages_module()
    alternate.alternate_stages(module, runs_on)
    alternate.alternate_stages(module, runs_on)  # a second install does not wrap twice
    trainer = SimpleNamespace(global_steps=0)
    stages = module.PilotStagesRounds(trainer)
    for step in (1, 2, 3, 4):
        trainer.global_steps = step
        pulled = {"prompts": f"pulled at {step}"}
        assert stages.step(pulled) == ({"prompts": "chosen by the stages"} if step in staged_steps else pulled)
    assert stages.prepared == staged_steps  # no stage ran on the other steps


WRAPPED = {
    alternate.alternate: ("DataFlexTrainerMixin", "_compute_advantage"),
    alternate.alternate_legacy: ("DataFlexLegacyMixin", "_dataflex_after_advantage"),
    alternate.alternate_stages: ("PilotStagesRounds", "step"),
    alternate.alternate_rounds: ("FilterRounds", "step"),
}


def test_each_trainer_lines_module_has_its_alternation():
    import importlib

    pytest.importorskip("verl")
    assert set(alternate.ALTERNATIONS.values()) == set(WRAPPED)
    for name, install in alternate.ALTERNATIONS.items():
        owner, method = WRAPPED[install]
        # the method the alternation wraps is still there
        assert callable(getattr(getattr(importlib.import_module(name), owner), method))


def test_a_bad_parity_names_the_variable_and_the_values():
    with pytest.raises(ValueError, match=r"DATAFLEX_CPU_ALTERNATE='3': give 'odd' or 'even'"):
        alternate.parity("3")


def test_a_run_spec_alternates_only_a_dataflex_run_on_either_line():
    from dataflex_lab.verl.cpu_loop.runner import RunSpec, run_env

    block = {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}}
    env = run_env("m.jsonl", spec=RunSpec(trainer_mode="dataflex_sync", dataflex=block, dataflex_on_steps="even"))
    assert env[alternate.ALTERNATE_ENV] == "even"
    legacy = RunSpec(use_v1=False, dataflex=block, dataflex_on_steps="odd")
    assert run_env("m.jsonl", spec=legacy)[alternate.ALTERNATE_ENV] == "odd"
    assert alternate.ALTERNATE_ENV not in run_env("m.jsonl", spec=RunSpec(trainer_mode="dataflex_sync", dataflex=block))
    with pytest.raises(ValueError, match="needs a dataflex: block"):
        run_env("m.jsonl", spec=RunSpec(dataflex_on_steps="odd"))
    with pytest.raises(ValueError, match="give 'odd' or 'even'"):
        run_env("m.jsonl", spec=RunSpec(use_v1=False, dataflex=block, dataflex_on_steps="all"))
