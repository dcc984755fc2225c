import pytest
import torch

from dataflex_core import (
    Component,
    DeclarationError,
    Reweighter,
    Scorer,
    Selector,
    UnknownParamError,
    accepted_params,
    register_reweighter,
    register_scorer,
)


@pytest.mark.parametrize(
    ("attrs", "needle"),
    [
        ({"timing": "after_lunch"}, "timing = 'after_lunch'"),
        ({"granularity": "batch"}, "granularity = 'batch'"),
        ({"requires": "advantages"}, "requires must be a list"),
        ({"requires": ["advantages", 3]}, "requires must be a list"),
        ({"needs_groups": "yes"}, "needs_groups must be True or False"),
    ],
)
def test_invalid_scorer_declaration_fails_at_class_definition(attrs, needle):
    with pytest.raises(DeclarationError) as info:
        type("BrokenScorer", (Scorer,), attrs)
    assert "BrokenScorer" in str(info.value)
    assert needle in str(info.value)


def test_actuator_granularity_declaration_is_checked():
    with pytest.raises(DeclarationError, match="BadSelector.accepts_granularity"):
        type("BadSelector", (Selector,), {"accepts_granularity": "prompt"})


def test_valid_declarations_are_kept_as_written():
    class S(Scorer):
        requires = ["rm_scores"]
        timing = "post_reward"
        granularity = "token"
        needs_groups = True

    assert S.requires == ["rm_scores"] and S.timing == "post_reward"
    assert S.granularity == "token" and S.needs_groups is True


def test_unknown_param_reaching_the_base_is_an_error_listing_accepted_params():
    class R(Reweighter):
        def __init__(self, temperature: float = 1.0, **kwargs):
            super().__init__(**kwargs)
            self.temperature = temperature

    assert R(temperature=2.0).temperature == 2.0
    with pytest.raises(
        UnknownParamError, match=r"unknown param\(s\) \['temprature'\].*accepted params: \['temperature'\]"
    ):
        R(temprature=2.0)


def test_accepted_params_collects_the_whole_mro():
    class Base(Reweighter):
        def __init__(self, alpha: float = 0.5, **kwargs):
            super().__init__(**kwargs)
            self.alpha = alpha

    class Child(Base):
        def __init__(self, beta: int = 3, **kwargs):
            super().__init__(**kwargs)
            self.beta = beta

    assert accepted_params(Child) == {"alpha": 0.5, "beta": 3}
    assert Child(alpha=0.1, beta=2).describe().endswith("(alpha=0.1, beta=2)")


def test_accepted_params_hands_out_a_fresh_dict_of_every_settable_param():
    class Once(Reweighter):
        def __init__(self, gamma: float = 2.0, **kwargs):
            super().__init__(**kwargs)
            self.gamma = gamma

    first = accepted_params(Once)
    first["gamma"] = "changed by a caller"
    assert accepted_params(Once) == {"gamma": 2.0}  # the caller's change did not reach the next call
    assert Once(gamma=0.5).describe().endswith("(gamma=0.5)")


def test_decorator_requires_the_matching_base_class():
    with pytest.raises(DeclarationError, match="not a subclass of Scorer"):

        @register_scorer("not_a_scorer")
        class Plain:  # noqa: F841
            pass

    with pytest.raises(DeclarationError, match="not a subclass of Reweighter"):

        @register_reweighter("scorer_as_reweighter")
        class S(Scorer):  # noqa: F841
            pass


def test_decorator_sets_the_name_and_returns_the_class():
    @register_scorer("test_components_named")
    class Named(Scorer):
        pass

    assert Named.name == "test_components_named"
    assert isinstance(Named(), Scorer)


def test_stateless_components_refuse_state_they_cannot_restore():
    c = Component()
    assert c.state_dict() == {}
    c.load_state_dict({})
    with pytest.raises(ValueError, match="stateless"):
        c.load_state_dict({"ema": torch.tensor(1.0)})


def test_an_undeclared_reweighter_takes_per_sample_scores_as_the_guide_says():
    from dataflex_core import Reweighter

    class GuideSoftmax(Reweighter):
        def act(self, scores, batch, **ctx):
            return scores

    assert GuideSoftmax.accepts_granularity == ("prompt", "response")


def test_requires_set_by_the_instance_is_checked_and_is_what_declared_fields_reads():
    from dataflex_core import DeclarationError, Scorer
    from dataflex_core.components import declared_fields

    class Keyed(Scorer):
        requires = ["rm_scores"]
        needs_groups = True

        def __init__(self, key: str = "rm_scores", **kwargs):
            super().__init__(**kwargs)
            self.requires = [key]

    assert declared_fields(Keyed(key="token_level_scores")) == ["response_mask", "token_level_scores", "uid"]
    assert Keyed.requires == ["rm_scores"]
    with pytest.raises(DeclarationError, match="requires must be a list of field names"):
        Keyed(key=3)
