import sys

import pytest
import torch
from omegaconf import OmegaConf

from dataflex_core import (
    Batch,
    ConfigError,
    IncompatibleComponentError,
    ParamTypeError,
    Reweighter,
    Scorer,
    Selector,
    UnknownComponentError,
    UnknownParamError,
    build_from_config,
    mean_one,
    register_reweighter,
    register_scorer,
    register_selector,
)
from dataflex_core.config import GroupsUncheckedWarning


@register_scorer("cfg_adv_mag")
class AdvMag(Scorer):
    requires = ["advantages", "response_mask"]

    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]
        mask = batch.batch["response_mask"].to(adv.dtype)
        return (adv.abs() * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


@register_scorer("cfg_group_rate")
class GroupRate(Scorer):
    needs_groups = True

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch))


@register_scorer("cfg_token")
class TokenScorer(Scorer):
    granularity = "token"

    def score(self, batch, step_id, **ctx):
        return torch.ones_like(batch.batch["response_mask"], dtype=torch.float32)


@register_reweighter("cfg_softmax")
class Softmax(Reweighter):
    accepts_granularity = ("prompt", "response")

    def __init__(self, temperature: float = 1.0, normalize: bool = True, **kwargs):
        super().__init__(**kwargs)
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.normalize = normalize

    def act(self, scores, batch, **ctx):
        return mean_one(torch.softmax(scores.float() / self.temperature, 0), batch)


@register_reweighter("cfg_needs_k")
class NeedsK(Reweighter):
    def __init__(self, k, **kwargs):
        super().__init__(**kwargs)
        self.k = k


@register_selector("cfg_keep_all")
class KeepAll(Selector):
    def act(self, scores, batch, **ctx):
        return torch.ones(len(batch))


def block(**overrides):
    cfg = {
        "mechanism": "reweight",
        "scorer": {"name": "cfg_adv_mag", "params": {}},
        "actuator": {"name": "cfg_softmax", "params": {"temperature": 1.0}},
        "warmup_step": 0,
    }
    cfg.update(overrides)
    return cfg


def test_builds_the_documented_block_and_the_weights_have_mean_one():
    pipeline = build_from_config(block(actuator={"name": "cfg_softmax", "params": {"temperature": 0.5}}))
    assert pipeline.mechanism == "reweight" and pipeline.warmup_step == 0
    assert isinstance(pipeline.scorer, AdvMag) and pipeline.actuator.temperature == 0.5
    assert pipeline.requires == ["response_mask", "advantages"]
    batch = Batch({"advantages": torch.randn(6, 4), "response_mask": torch.ones(6, 4)})
    w = pipeline.actuator.act(pipeline.scorer.score(batch, 0), batch)
    assert w.mean().item() == pytest.approx(1.0)


def test_accepts_omegaconf_nodes_and_name_shorthand():
    cfg = OmegaConf.create({"mechanism": "reweight", "scorer": "cfg_adv_mag", "actuator": {"name": "cfg_softmax"}})
    pipeline = build_from_config(cfg)
    assert pipeline.actuator.temperature == 1.0


def grouped_by_uid(name):
    """A host's answer for its estimators (each host knows its own framework's)."""
    return {"grpo": True, "rloo": True, "gae": False}.get(name)


def test_group_scorer_adds_uid_to_the_required_fields():
    pipeline = build_from_config(
        block(scorer={"name": "cfg_group_rate"}), adv_estimator="grpo", is_group_estimator=grouped_by_uid
    )
    assert pipeline.needs_groups and pipeline.requires[-1] == "uid"


def test_unknown_mechanism():
    with pytest.raises(ConfigError, match="mechanism='rewieght' is not one of reweight, select, mix"):
        build_from_config(block(mechanism="rewieght"))


@pytest.mark.parametrize("written", [[{"scorer": "advantage_magnitude"}], OmegaConf.create(["reweight"]), "reweight"])
def test_a_block_that_is_not_a_mapping_is_a_config_error_where_it_is_read(written):
    from dataflex_core.block import read_block
    from dataflex_core.session import DataFlexSession

    for read in (build_from_config, read_block, DataFlexSession):  # read once, by one function
        with pytest.raises(ConfigError, match="the dataflex block must be a mapping of keys such as mechanism"):
            read(written)


def test_unknown_block_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match="unknown key\\(s\\) \\['warmup_steps'\\]; did you mean 'warmup_step'"):
        build_from_config(block(warmup_steps=3))


def test_host_keys_are_accepted_when_declared():
    pipeline = build_from_config(block(on_invalid="uniform"), extra_keys=["on_invalid"])
    assert pipeline.extra == {"on_invalid": "uniform"}


def test_unknown_component_lists_installed_and_the_closest_match():
    with pytest.raises(UnknownComponentError) as info:
        build_from_config(block(scorer={"name": "cfg_adv_magg"}))
    message = str(info.value)
    assert "scorer 'cfg_adv_magg' is not installed; did you mean 'cfg_adv_mag'?" in message
    assert "cfg_group_rate" in message


def test_unknown_component_without_a_close_match_separates_the_installed_list():
    with pytest.raises(UnknownComponentError) as info:
        build_from_config(block(scorer={"name": "length_penalty"}))
    assert "scorer 'length_penalty' is not installed; installed scorers: " in str(info.value)
    # which environment to install into: the one this process runs in (a nox session's is not the user's own)
    assert f"into the environment this runs in ({sys.prefix}): `{sys.executable} -m pip install ...`" in str(info.value)
    with pytest.raises(UnknownParamError, match="has no param 'zzz'; accepted params: temperature=1.0"):
        build_from_config(block(actuator={"name": "cfg_softmax", "params": {"zzz": 2.0}}))


def test_actuator_of_the_wrong_kind_is_named():
    with pytest.raises(
        IncompatibleComponentError, match="'cfg_softmax' is a reweighter, but this mechanism needs a selector"
    ):
        build_from_config(block(mechanism="select"))
    assert isinstance(build_from_config(block(mechanism="select", actuator="cfg_keep_all")).actuator, KeepAll)


def test_mistyped_param_lists_accepted_params():
    with pytest.raises(UnknownParamError) as info:
        build_from_config(block(actuator={"name": "cfg_softmax", "params": {"temprature": 2.0}}))
    message = str(info.value)
    assert "has no param 'temprature'; did you mean 'temperature'?" in message
    assert "accepted params: temperature=1.0, normalize=True" in message


def test_ill_typed_and_missing_params():
    with pytest.raises(
        ParamTypeError, match="temperature='hot' has type str, but reweighter 'cfg_softmax' expects float"
    ) as info:
        build_from_config(block(actuator={"name": "cfg_softmax", "params": {"temperature": "hot"}}))
    # its own class: not "unknown", still a configuration error
    assert not isinstance(info.value, UnknownParamError) and isinstance(info.value, ConfigError)
    with pytest.raises(UnknownParamError, match="needs param 'k'"):
        build_from_config(block(actuator={"name": "cfg_needs_k"}))


def test_constructor_rejection_names_the_component():
    with pytest.raises(
        ConfigError, match="cfg_softmax rejected params \\{'temperature': -1.0\\}: temperature must be > 0"
    ):
        build_from_config(block(actuator={"name": "cfg_softmax", "params": {"temperature": -1.0}}))


def test_granularity_the_actuator_does_not_accept():
    with pytest.raises(
        IncompatibleComponentError,
        match="gives token-level scores, but reweighter 'cfg_softmax' accepts only prompt, response",
    ):
        build_from_config(block(scorer="cfg_token"))


def test_group_scorer_is_rejected_on_a_non_group_estimator():
    with pytest.raises(IncompatibleComponentError, match="needs GRPO groups.*adv_estimator='gae'"):
        build_from_config(block(scorer="cfg_group_rate"), adv_estimator="gae", is_group_estimator=grouped_by_uid)
    # core holds no framework's list: the host's answer decides
    with pytest.raises(IncompatibleComponentError):
        build_from_config(block(scorer="cfg_group_rate"), adv_estimator="grpo", is_group_estimator=lambda _: False)


def test_group_scorer_with_an_unknown_or_missing_estimator_warns_naming_it():
    with pytest.warns(GroupsUncheckedWarning, match="'cfg_group_rate' needs GRPO groups.*estimator 'my_estimator'"):
        build_from_config(
            block(scorer="cfg_group_rate"), adv_estimator="my_estimator", is_group_estimator=grouped_by_uid
        )
    with pytest.warns(GroupsUncheckedWarning, match="estimator 'grpo'"):  # no host answer: nothing is known
        build_from_config(block(scorer="cfg_group_rate"), adv_estimator="grpo")
    with pytest.warns(GroupsUncheckedWarning, match="no advantage estimator was given"):
        build_from_config(block(scorer="cfg_group_rate"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", GroupsUncheckedWarning)
        build_from_config(block(scorer="cfg_group_rate"), adv_estimator="grpo", is_group_estimator=grouped_by_uid)
        build_from_config(block(scorer="cfg_adv_mag"))


@pytest.mark.parametrize("value", [-1, 1.5, "3", True])
def test_warmup_step_must_be_a_non_negative_integer(value):
    with pytest.raises(ConfigError, match="warmup_step must be an integer >= 0"):
        build_from_config(block(warmup_step=value))


def test_component_entry_with_stray_keys_is_rejected():
    with pytest.raises(ConfigError, match="dataflex.actuator has unknown key\\(s\\) \\['temperature'\\]"):
        build_from_config(block(actuator={"name": "cfg_softmax", "temperature": 2.0}))


def test_warmup_gates_activity():
    pipeline = build_from_config(block(warmup_step=3))
    assert [pipeline.active(s) for s in (0, 2, 3, 4)] == [False, False, True, True]


def test_components_defined_in_execd_code_are_registered():
    source = (
        "from dataflex_core import Scorer, register_scorer\n"
        "@register_scorer('cfg_execd')\n"
        "class Execd(Scorer):\n"
        "    def score(self, batch, step_id, **ctx):\n"
        "        return batch.batch['response_mask'].sum(-1).float()\n"
    )
    exec(compile(source, "<notebook cell>", "exec"), {"__name__": "not_a_module_in_sys_modules"})
    assert build_from_config(block(scorer="cfg_execd")).scorer_spec.name == "cfg_execd"
