"""The training demos' common options: the DataFlex arm's block, and --params read strictly."""

from __future__ import annotations

import argparse

import pytest

from dataflex_lab import demo_report
from dataflex_lab.demo_report import DEFAULT_PAIRS, DemoOptions


def test_each_mechanism_defaults_to_its_pair_with_its_params():
    for mechanism, (scorer, scorer_params, actuator, actuator_params) in DEFAULT_PAIRS.items():
        block = DemoOptions(mechanism=mechanism).block()
        assert block["scorer"] == {"name": scorer, "params": scorer_params}
        assert block["actuator"] == {"name": actuator, "params": actuator_params}
    assert set(DemoOptions(mechanism="mix").block()) >= {"domains", "domain_key"}
    assert DemoOptions(mechanism="curriculum").block()["prompt_key"] == "index"


def test_naming_another_component_drops_the_defaults_params():
    block = DemoOptions(actuator="per_advantage").block()  # softmax's temperature is not per_advantage's
    assert block["actuator"] == {"name": "per_advantage", "params": {}}
    assert block["scorer"]["name"] == "advantage_magnitude"
    block = DemoOptions(actuator="softmax", actuator_params={"temperature": 0.5}).block()
    assert block["actuator"]["params"] == {"temperature": 0.5}


def test_an_unknown_mechanism_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="reweight, select, mix, curriculum"):
        DemoOptions(mechanism="resample").block()


def test_the_command_line_gives_the_options_and_refuses_loose_params(tmp_path):
    parser = argparse.ArgumentParser()
    demo_report.add_demo_arguments(parser, workdir="demo_out")
    args = parser.parse_args(["--scorer", "group_solve_rate", "--params", '{"scorer": {"success_threshold": 0.5}}',
                              "--seeds", "3", "--json", str(tmp_path / "out.json")])  # fmt: skip
    options = DemoOptions(**demo_report.demo_options(args))
    assert options.seed_list() == [0, 1, 2]
    assert options.block()["scorer"] == {"name": "group_solve_rate", "params": {"success_threshold": 0.5}}
    assert str(options.workdir) == "demo_out" and options.json_path == tmp_path / "out.json"
    for bad in ('{"temperature": 0.5}', "{not json", '{"actuator": 3}'):
        with pytest.raises(ValueError, match="--params"):
            demo_report.demo_options(parser.parse_args(["--params", bad]))


def test_the_filter_demo_is_dapos_dynamic_sampling_on_the_mixed_task():
    options = DemoOptions(mechanism="filter")
    block = options.block()
    assert block["scorer"]["name"] == "group_reward_variance" and block["actuator"]["name"] == "threshold_band"
    assert block["actuator"]["params"]["low"] == 0.0 and block["filter"]["on_short"] == "backfill"
    assert options.toy_task == "mixed"  # the echo task rarely has a group without reward variance
