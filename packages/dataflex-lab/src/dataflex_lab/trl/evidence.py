"""``dataflex-trl evidence``: the named recipes against uniform sampling on the task families, at equal rollouts.

Each (family, recipe, seed) is one real ``trainer.train()`` of TRL's GRPO on a tiny random Qwen2
(:func:`~dataflex_lab.trl.training_demo.train_arm`): ``uniform`` is TRL's plain trainer, every other recipe
:class:`~dataflex_trl.DataFlexGRPOTrainer` with its block. Every arm evaluates on the family's held-out split
and logs the compute counters, so each family ends with ``dataflex compare --x rollouts --target LEVEL``: the
area and final value at equal rollouts and the rollouts each recipe needed to reach the level, paired by seed,
Holm across recipes. Every recipe run is reported, separated or not.

To add a recipe (filter-and-refill, allocation, ...), add an entry to :data:`RECIPES`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

#: The baseline recipe: TRL's plain GRPOTrainer, prompts drawn uniformly.
UNIFORM = "uniform"
#: Recipe name -> the DataFlex arm's options (:class:`~dataflex_lab.demo_report.DemoOptions` fields);
#: ``uniform`` has none. Curricula: each shipped scorer with the learnability sampler.
RECIPES: dict[str, dict[str, Any] | None] = {
    UNIFORM: None,
    "curriculum": {"mechanism": "curriculum", "scorer": "solve_rate_ema", "scorer_params": {"alpha": 1.0},
                   "actuator": "learnability"},
    "curriculum_mopps": {"mechanism": "curriculum", "scorer": "mopps", "actuator": "learnability"},
    "select": {"mechanism": "select"},
    "reweight": {"mechanism": "reweight"},
}  # fmt: skip
#: What ``--quick`` runs: a smoke test of the whole path, not evidence.
QUICK = {"families": ["repeat"], "recipes": [UNIFORM, "curriculum"], "seeds": 2, "steps": 4, "val_every": 2}
METRIC = "eval_reward"


@dataclass
class Campaign:
    """What one campaign runs and where it writes."""

    families: list[str] = field(default_factory=lambda: ["repeat", "count"])
    recipes: list[str] = field(default_factory=lambda: list(RECIPES))
    seeds: int = 8
    steps: int = 30
    val_every: int = 5
    target: float = 0.15
    jobs: int = 1
    workdir: Path = Path("dataflex_evidence")
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self) -> None:
        from .. import task_families

        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown:
            raise ValueError(f"unknown recipe(s) {unknown}; the recipes are {', '.join(RECIPES)}")
        if UNIFORM not in self.recipes:
            raise ValueError(f"the recipes must include {UNIFORM!r}, the baseline every other is compared with")
        for name in self.families:
            task_families.structure_from(self.task_params.get(name), task_families.family(name))
        if self.seeds < 2:
            raise ValueError("--seeds must be at least 2: the comparison is over seeds, paired")


def settings_for(campaign: Campaign, family: str, recipe: str):
    from .training_demo import DemoSettings

    options = dict(RECIPES[recipe] or {})
    return DemoSettings(
        **options,
        task=family,
        task_params=campaign.task_params.get(family),
        steps=campaign.steps,
        val_every=campaign.val_every,
        workdir=campaign.workdir / family,
    )


def run_one(campaign: Campaign, family: str, recipe: str, seed: int) -> dict[str, Any]:
    """One training run; its record in the ``dataflex-demo/1`` layout, with its wall time."""
    import torch

    from .training_demo import train_arm

    torch.set_num_threads(1)  # jobs run side by side; one thread each is what a 2-core machine has room for
    started = time.perf_counter()
    settings = settings_for(campaign, family, recipe)
    steps = train_arm(settings, "baseline" if recipe == UNIFORM else recipe, seed, lambda record: None)
    return {"arm": recipe, "seed": seed, "steps": steps, "wall_s": round(time.perf_counter() - started, 1)}


def run_campaign(campaign: Campaign, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Every (family, recipe, seed), then per family the comparison at equal rollouts: tables, plots, JSON."""
    from transformers.utils import logging as hf_logging

    from .. import task_families
    from ..compare import CompareError, compare_runs
    from ..demo_report import JSON_FORMAT

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    campaign.check()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_logging.set_verbosity_error()
    started = time.perf_counter()
    jobs = [(f, r, s) for f in campaign.families for s in range(campaign.seeds) for r in campaign.recipes]
    say(
        f"evidence campaign: {len(campaign.families)} famil{'y' if len(campaign.families) == 1 else 'ies'} x "
        f"{len(campaign.recipes)} recipes x {campaign.seeds} seeds = {len(jobs)} TRL GRPO runs of {campaign.steps} "
        f"steps, {campaign.jobs} at a time; held-out evaluation every {campaign.val_every} steps"
    )
    records: dict[str, list[dict[str, Any]]] = {f: [] for f in campaign.families}
    if campaign.jobs > 1:
        with ProcessPoolExecutor(campaign.jobs) as pool:
            futures = {pool.submit(run_one, campaign, *job): job for job in jobs}
            for future, (family, recipe, seed) in futures.items():
                record = future.result()
                records[family].append(record)
                say(f"  {family} {recipe} seed {seed}: {record['wall_s']:.0f} s, {_last_eval(record)}")
    else:
        for family, recipe, seed in jobs:
            record = run_one(campaign, family, recipe, seed)
            records[family].append(record)
            say(f"  {family} {recipe} seed {seed}: {record['wall_s']:.0f} s, {_last_eval(record)}")
    campaign.workdir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"families": {}, "wall_s": None}
    for family in campaign.families:
        task = task_families.family(family)
        splits = task.build(task_families.structure_from(campaign.task_params.get(family), task), 0)
        document = {
            "format": JSON_FORMAT,
            "host": "trl",
            "baseline": UNIFORM,
            "seeds": list(range(campaign.seeds)),
            "runs": records[family],
            "settings": {"task": task_families.describe(splits), "steps": campaign.steps,
                         "val_every": campaign.val_every, "recipes": {r: RECIPES[r] for r in campaign.recipes}},
        }  # fmt: skip
        runs_path = campaign.workdir / f"{family}.runs.json"
        runs_path.write_text(json.dumps(document) + "\n")
        say(f"\n# {family}: {json.dumps(task_families.describe(splits))}\n")
        try:
            report = compare_runs(document, baseline=UNIFORM, metrics=[METRIC], x="rollouts", target=campaign.target)
        except CompareError as exc:
            say(f"no comparison: {exc}")
            summary["families"][family] = {"error": str(exc)}
            continue
        say(report.markdown())
        report.write_json(campaign.workdir / f"{family}.compare.json")
        (campaign.workdir / f"{family}.compare.md").write_text(report.markdown())
        try:
            report.plot(campaign.workdir / f"{family}.compare.png")
        except CompareError as exc:  # matplotlib missing
            say(f"plot skipped: {exc}")
        summary["families"][family] = report.as_dict()["metrics"][METRIC]
        say(
            f"reproduce the table: dataflex compare {runs_path} --metric {METRIC} --x rollouts "
            f"--target {campaign.target:g} --plot {family}.png"
        )
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    (campaign.workdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    say(f"\nwall time {summary['wall_s']:.0f} s; outputs in {campaign.workdir}/")
    return summary


def _last_eval(record: dict[str, Any]) -> str:
    evals = [r["metrics"][METRIC] for r in record["steps"] if METRIC in r["metrics"]]
    return f"held-out {evals[0]:.3f} -> {evals[-1]:.3f}" if evals else "no evaluation logged"
