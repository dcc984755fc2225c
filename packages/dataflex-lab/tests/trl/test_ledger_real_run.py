"""``dataflex ledger show`` on the ledger of a real TRL run: its counts are the run's ``dataflex/compute/*`` totals.

The lab's TRL demo run (TRL's own ``GRPOTrainer`` loop, a tiny model on the CPU, the mixed toy task whose constant
prompts are always solved or never) with ``prompt_key``, under ``mechanism: curriculum`` (every group trained:
the ledger's zero-variance rollouts are among the run's wasted ones) and ``mechanism: filter`` (groups without signal
generated, then filtered out).
"""

from __future__ import annotations

import json
import warnings

import pytest

from dataflex_core.cli import main


def real_run(tmp_path, mechanism: str, steps: int = 3):
    """The trained ``DataFlexGRPOTrainer`` and its last logged ``dataflex/compute/*_total`` counters."""
    from dataflex_trl import DataFlexGRPOTrainer

    from dataflex_lab.demo_report import CURRICULUM_TRAIN_ROWS
    from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset
    from dataflex_lab.trl.training_demo import DemoSettings, grpo_config

    settings = DemoSettings(mechanism=mechanism, steps=steps, val_every=0, workdir=tmp_path)
    tokenizer = char_tokenizer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = DataFlexGRPOTrainer(
            model=tiny_model(tokenizer, seed=0),
            reward_funcs=echo_reward,
            args=grpo_config(settings, "dataflex", 0),
            train_dataset=toy_dataset(CURRICULUM_TRAIN_ROWS, seed=0, task="mixed"),
            processing_class=tokenizer,
            dataflex={**settings.block(), "prompt_key": "index"},  # the toy rows' ids: a ledger for every mechanism
        )
        trainer.train()
    logged = [e for e in trainer.state.log_history if "dataflex/compute/rollouts_generated_total" in e]
    prefix, suffix = "dataflex/compute/", "_total"
    totals = {
        k[len(prefix) : -len(suffix)]: v for k, v in logged[-1].items() if k.startswith(prefix) and k.endswith(suffix)
    }
    return trainer, totals


@pytest.mark.parametrize("mechanism", ["curriculum", "filter"])
def test_show_counts_are_the_runs_compute_totals(tmp_path, capsys, mechanism):
    trainer, totals = real_run(tmp_path, mechanism)
    path = tmp_path / "ledger.parquet"
    assert trainer.dataflex.export_ledger(path)
    capsys.readouterr()
    assert main(["ledger", "show", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for name in ("rollouts_generated", "rollouts_trained", "rollouts_filtered", "tokens_generated"):
        assert report["totals"][name] == totals[name], name
    if mechanism == "curriculum":
        assert report["totals"]["rollouts_generated"] == 3 * 32  # 8 prompts x 4 a step
    assert report["totals"]["zero_variance_rollouts"] > 0  # the mixed task's constant prompts
    if mechanism == "curriculum":  # every group trained: its groups without signal are wasted rollouts (the run's
        # wasted ones also count a rollout whose reward is its mixed group's mean: its advantage is 0 too)
        assert 0 < report["totals"]["zero_variance_rollouts"] <= totals["rollouts_wasted"]
    else:
        assert totals["rollouts_filtered"] > 0
    assert report["last_step"] == 3 and report["prompt_key"] == "index"
