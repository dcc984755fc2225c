"""``dataflex-verl demo``: train with verl's own GRPO loop on the CPU, the baseline against DataFlex.

Each arm is a real run of ``python -m verl.trainer.main_ppo`` (rollout,
reward, old log-prob, advantage, actor update, weight sync) on the CPU
harness (:mod:`dataflex_verl.cpu_loop`): a tiny random Qwen2 learning the toy
echo task. The arms share the seed, so they start from the same model and
draw the same prompts; ``sync`` is verl's plain trainer, ``dataflex_sync``
runs the configured scorer and actuator in ``_compute_advantage``.

A toy run shows the mechanics (weights reach the loss, their statistics, what
they cost) and a direction; it is not a benchmark result. With ``--seeds K``
the arms are compared over K seeds with :func:`dataflex_core.compare.compare_runs`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from dataflex_core import demo_report

from .version import __version__

#: The baseline arm and the DataFlex arm, as verl trainer modes.
ARMS = ("sync", "dataflex_sync")
#: Default scorer and actuator (with params) per mechanism.
DEFAULT_PAIRS: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
    "reweight": ("advantage_magnitude", {}, "softmax", {"temperature": 1.0}),
    "select": ("advantage_magnitude", {}, "topk_fraction", {"fraction": 0.5}),
    "mix": ("reward_difficulty", {}, "reward_gap", {}),
}
#: verl's names for the step's mean reward and step time.
METRICS = demo_report.HostMetrics(reward="critic/score/mean", step_time="timing_s/step")


@dataclass
class DemoSettings:
    """What ``dataflex-verl demo`` runs (the command-line options)."""

    mechanism: str = "reweight"
    scorer: str | None = None
    actuator: str | None = None
    scorer_params: dict[str, Any] | None = None
    actuator_params: dict[str, Any] | None = None
    steps: int = 30
    seed: int = 0
    seeds: int = 1
    loss_agg_mode: str = "token-mean"
    lr: float = 1e-2
    workdir: Path = Path("dataflex_demo")
    json_path: Path | None = None
    plot_path: Path | None = None
    warmup_step: int = 0
    extra_overrides: list[str] = field(default_factory=list)

    def block(self) -> dict[str, Any]:
        """The ``dataflex:`` block of the DataFlex arm."""
        default = DEFAULT_PAIRS[self.mechanism]
        scorer = self.scorer or default[0]
        actuator = self.actuator or default[2]
        scorer_params = (
            self.scorer_params if self.scorer_params is not None else (default[1] if scorer == default[0] else {})
        )
        actuator_params = (
            self.actuator_params if self.actuator_params is not None else (default[3] if actuator == default[2] else {})
        )
        block: dict[str, Any] = {
            "mechanism": self.mechanism,
            "scorer": {"name": scorer, "params": dict(scorer_params)},
            "actuator": {"name": actuator, "params": dict(actuator_params)},
            "warmup_step": self.warmup_step,
        }
        if self.mechanism == "mix":
            from dataflex_core import toy_task

            block.update({"domains": list(toy_task.DOMAINS), "domain_key": "domain"})
        return block

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]


def check_components(block: dict[str, Any]) -> None:
    """Build the block against the installed registry now, so a typo fails before any run starts.

    The trainer's constructor checks it again against the run's verl config (mount-time checks).
    """
    from dataflex_core import build_from_config
    from dataflex_core.config import CORE_KEYS

    build_from_config(block, extra_keys=[key for key in block if key not in CORE_KEYS])


def run_training_demo(settings: DemoSettings, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Train every arm for every seed; print progress, the summary table (and the comparison); return the document."""
    from .cpu_loop import runner

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    block = settings.block()
    check_components(block)
    started = time.perf_counter()
    workdir = Path(settings.workdir).resolve()
    say(
        f"dataflex-verl {__version__} training demo: verl's GRPO fit loop on the CPU, tiny random Qwen2, toy echo task; "
        f"{settings.steps} steps x {len(ARMS)} arms x {settings.seeds} seed(s), loss_agg_mode={settings.loss_agg_mode}"
    )
    say(f"DataFlex arm: {json.dumps(block)}")
    say(demo_report.TOY_RUN_NOTE)
    workspace = runner.prepare_workspace(workdir / "workspace", model_seed=settings.seed, data_seed=settings.seed)
    runs: list[dict[str, Any]] = []
    for seed in settings.seed_list():
        for arm in ARMS:
            spec = runner.RunSpec(
                trainer_mode=arm,
                dataflex=block if arm != "sync" else None,
                steps=settings.steps,
                seed=seed,
                loss_agg_mode=settings.loss_agg_mode,
                lr=settings.lr,
                experiment=f"{arm}_seed{seed}",
                extra=list(settings.extra_overrides),
            )
            say(f"\n{arm}, seed {seed}: starting verl (Ray, workers, rollout server: about a minute) ...")
            arm_start = time.perf_counter()
            steps = runner.run_entry_point(
                spec,
                workspace,
                workdir / "metrics" / f"{arm}_seed{seed}.jsonl",
                log_file=workdir / "logs" / f"{arm}_seed{seed}.log",
                on_step=lambda record, arm=arm, seed=seed: say(
                    demo_report.progress_line(arm, seed, settings.steps, record, METRICS)
                ),
            )
            say(f"{arm}, seed {seed}: {len(steps)} steps in {time.perf_counter() - arm_start:.0f} s")
            runs.append({"arm": arm, "seed": seed, "steps": steps})
    document = demo_report.demo_document(
        "verl",
        settings.seed_list(),
        runs,
        {
            "dataflex": block,
            "steps": settings.steps,
            "loss_agg_mode": settings.loss_agg_mode,
            "lr": settings.lr,
            "dataflex_verl": __version__,
            "wall_s": round(time.perf_counter() - started, 1),
        },
    )
    title = (
        f"verl GRPO on the CPU, toy echo task: {block['mechanism']} "
        f"{block['scorer']['name']} -> {block['actuator']['name']} (loss_agg_mode={settings.loss_agg_mode})"
    )
    demo_report.finish(
        document,
        names=METRICS,
        baseline="sync",
        title=title,
        json_path=settings.json_path,
        plot_path=settings.plot_path or workdir / "demo.png",
        say=say,
    )
    say(
        f"\n{demo_report.TOY_RUN_NOTE}\nwall time {time.perf_counter() - started:.0f} s; verl's logs under {workdir / 'logs'}"
    )
    return document
