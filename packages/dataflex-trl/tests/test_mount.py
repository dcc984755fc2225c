"""Everything checkable is refused in DataFlexGRPOTrainer's constructor, with the setting to change."""

from __future__ import annotations

import pytest
from dataflex_trl.mount import LOSS_UNITS, loss_unit

from dataflex_core import ConfigError, IncompatibleComponentError, Scorer, UnknownComponentError, register_scorer

ADV_SOFTMAX = {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}}


@register_scorer("trltest_needs_values")
class NeedsValues(Scorer):
    requires = ["values"]

    def score(self, batch, step_id, **ctx):
        raise AssertionError("never runs")


@register_scorer("trltest_needs_ref")
class NeedsRef(Scorer):
    requires = ["ref_log_prob"]

    def score(self, batch, step_id, **ctx):
        raise AssertionError("never runs")


@register_scorer("trltest_needs_column")
class NeedsColumn(Scorer):
    requires = ["difficulty"]

    def score(self, batch, step_id, **ctx):
        raise AssertionError("never runs")


def test_every_loss_type_of_trl_has_a_unit():
    from trl import GRPOConfig

    choices = GRPOConfig.__dataclass_fields__["loss_type"].metadata.get("help", "")
    assert all(name in choices for name in LOSS_UNITS)
    assert loss_unit("grpo") == loss_unit("sapo") == "sequence"
    assert {loss_unit(t) for t in ("bnpo", "dapo", "dr_grpo", "cispo", "vespo", "luspo")} == {"token"}
    with pytest.raises(ConfigError, match="loss_type='my_loss'.*supported: grpo"):
        loss_unit("my_loss")


def test_the_block_is_required(make_trainer, tokenizer):
    from dataflex_trl import DataFlexGRPOTrainer

    from dataflex_lab.trl.toy import echo_reward, tiny_model

    plain = make_trainer("dapo")
    with pytest.raises(ConfigError, match=r"needs dataflex=\{\.\.\.\}.*use trl.GRPOTrainer"):
        DataFlexGRPOTrainer(
            model=tiny_model(tokenizer, seed=0), reward_funcs=echo_reward, args=plain.args, processing_class=tokenizer
        )


@pytest.mark.parametrize(
    ("block", "config", "error", "message"),
    [
        ({**ADV_SOFTMAX, "scorer": {"name": "advantage_magnitud"}}, {}, UnknownComponentError,
         "did you mean 'advantage_magnitude'"),
        ({**ADV_SOFTMAX, "on_invalid": "ignore"}, {}, ConfigError, "on_invalid='ignore'"),
        ({**ADV_SOFTMAX, "scorer": {"name": "trltest_needs_values"}}, {}, IncompatibleComponentError,
         "'values'.*has no critic"),
        ({**ADV_SOFTMAX, "scorer": {"name": "trltest_needs_ref"}}, {}, IncompatibleComponentError,
         "'ref_log_prob'.*set beta > 0"),
        ({**ADV_SOFTMAX, "scorer": {"name": "trltest_needs_column"}}, {}, IncompatibleComponentError,
         r"dataset column\(s\) \['difficulty'\].*columns \['prompt', 'answer', 'domain', 'index'\]"),
        ({**ADV_SOFTMAX, "scorer": {"name": "trltest_needs_column"}}, {"remove_unused_columns": True},
         IncompatibleComponentError, "passes no dataset columns"),
        ({"mechanism": "mix", "scorer": {"name": "reward_difficulty"}, "actuator": {"name": "static"},
          "domains": ["vowel", "consonant"], "domain_key": "topic"}, {}, IncompatibleComponentError,
         r"dataset column\(s\) \['topic'\]"),
        ({**ADV_SOFTMAX, "domains": ["vowel"]}, {}, ConfigError, "read only by mechanism: mix"),
    ],
    ids=["unknown-scorer", "bad-on_invalid", "values", "ref-without-beta", "missing-column", "columns-removed",
         "mix-domain-column", "stray-mix-key"],
)  # fmt: skip
def test_the_constructor_refuses_configs_that_cannot_work(make_trainer, block, config, error, message):
    with pytest.raises(error, match=message):
        make_trainer("dapo", block, **config)


def test_reference_log_probs_are_provided_with_a_kl_term(make_trainer, tokenizer, tmp_path):
    from dataflex_lab.trl.toy import tiny_model

    # beta > 0 makes TRL load a reference model from the policy's name: a local folder, offline
    tiny_model(tokenizer, seed=0).save_pretrained(tmp_path / "policy")
    block = {**ADV_SOFTMAX, "scorer": {"name": "trltest_needs_ref"}}
    trainer = make_trainer("dapo", block, model=str(tmp_path / "policy"), beta=0.04)
    assert "ref_log_prob" in trainer.dataflex.fields


def test_mix_on_a_streaming_dataset_is_refused(make_trainer, dataset):
    streaming = dataset.to_iterable_dataset()
    block = {"mechanism": "mix", "scorer": {"name": "reward_difficulty"}, "actuator": {"name": "static"},
             "domains": ["vowel", "consonant"]}  # fmt: skip
    with pytest.raises(IncompatibleComponentError, match="cannot resample"):
        make_trainer("dapo", block, train_dataset=streaming)
