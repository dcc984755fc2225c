"""One run of the evidence campaign in verl's own fit loop (the recipes TRL cannot run: ``allocate``).

A run is the verl demo's arm (:mod:`dataflex_lab.verl.training_demo`): ``python -m verl.trainer.main_ppo`` on the
CPU harness, the family's train prompts as verl's train files and its held-out split as its validation files,
8 prompts x 8 responses a step. verl's own ``_validate`` scores the held-out split (8 samples at temperature 1,
each keyed by step, prompt and sample on the run's seed: the same model gives the same score, and both arms of a
seed draw with the same keys); its metric is copied under the campaign's held-out name
(:data:`~dataflex_lab.trl.heldout.METRIC`) so one family's document compares every host's runs by one name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_verl(options: dict[str, Any] | None, *, name: str, family: str, task_params: dict[str, Any] | None,
             steps: int, val_every: int, seed: int, workdir: Path, metric: str) -> list[dict[str, Any]]:  # fmt: skip
    """One verl run of the method ``name``: ``options`` the DataFlex arm's demo options (``None``: verl's plain
    trainer); its ``{"step", "metrics"}`` records, the held-out reward also under ``metric``."""
    from .cpu_loop import runner
    from .training_demo import DemoSettings, samples_per_prompt, seed_workspace, validation_metric

    settings = DemoSettings(**(options or {}), task=family, task_params=task_params, steps=steps,
                            val_every=val_every, workdir=workdir)  # fmt: skip
    workdir = Path(workdir).resolve()
    workspace = seed_workspace(settings, workdir, seed)
    arm = "sync" if options is None else "dataflex_sync"
    spec = runner.RunSpec(
        trainer_mode=arm,
        dataflex=None if options is None else settings.block(),
        steps=steps,
        seed=seed,
        samples_per_prompt=samples_per_prompt(settings),
        compute_counters=options is None,  # the plain arm's counters come from the harness
        lr=settings.learning_rate,
        experiment=f"{name}_seed{seed}",
        extra=settings.overrides(),
    )
    name = spec.experiment
    # every run of the family shares one compiled copy of torch and verl where bytecode is not written beside them
    records = runner.run_entry_point(
        spec, workspace, workdir / "metrics" / f"{name}.jsonl", log_file=workdir / "logs" / f"{name}.log",
        extra_env=runner.bytecode_env(workdir / "pycache"),
    )  # fmt: skip
    verl_metric = validation_metric(settings)
    for record in records:
        if verl_metric in record["metrics"]:
            record["metrics"][metric] = record["metrics"][verl_metric]
    return records
