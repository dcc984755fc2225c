"""The harness's alternation of DataFlex's V1 step hook (the ``fit`` bench's paired measure)."""

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


def test_a_bad_parity_names_the_variable_and_the_values():
    with pytest.raises(ValueError, match=r"DATAFLEX_CPU_ALTERNATE='3': give 'odd' or 'even'"):
        alternate.parity("3")


def test_a_run_spec_alternates_only_a_v1_dataflex_run():
    from dataflex_lab.verl.cpu_loop.runner import RunSpec, run_env

    block = {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}}
    env = run_env("m.jsonl", spec=RunSpec(trainer_mode="dataflex_sync", dataflex=block, dataflex_on_steps="even"))
    assert env[alternate.ALTERNATE_ENV] == "even"
    assert alternate.ALTERNATE_ENV not in run_env("m.jsonl", spec=RunSpec(trainer_mode="dataflex_sync", dataflex=block))
    with pytest.raises(ValueError, match="needs a dataflex: block and use_v1=True"):
        run_env("m.jsonl", spec=RunSpec(dataflex_on_steps="odd"))
    with pytest.raises(ValueError, match="needs a dataflex: block and use_v1=True"):
        run_env("m.jsonl", spec=RunSpec(use_v1=False, dataflex=block, dataflex_on_steps="odd"))
