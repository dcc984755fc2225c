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

``--mechanism curriculum`` trains both arms on the toy task's mixed variant
(echo prompts beside prompts that are already solved or unsolvable, whose
rollouts teach nothing; :func:`dataflex_core.toy_task.mixed_prompts`) and
validates on echo prompts every few steps: the batch reward of a curriculum
arm is not comparable with uniform sampling's (it draws other prompts), the
validation reward is. The summary then says how many steps and rollouts each
arm needed to reach 3/4 of the baseline's improvement of it.
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
    "curriculum": ("solve_rate_ema", {"alpha": 1.0}, "learnability", {}),
}
#: verl's names for the step's mean reward and step time.
METRICS = demo_report.HostMetrics(reward="critic/score/mean", step_time="timing_s/step")
#: The curriculum demo's task and its number of train prompts (few enough that each recurs within a run).
CURRICULUM_TASK, CURRICULUM_TRAIN_ROWS = "mixed", 48
#: Responses per validation prompt (sampled at temperature 1, so the validation reward moves smoothly).
VAL_SAMPLES = 4
#: verl's validation reward of the toy task's prompts (``val-aux/<data_source>/reward/mean@<n>``; verl files the
#: same value under ``val-core/.../acc/...`` when the reward function's output has an ``acc``).
VAL_REWARD = f"val-aux/dataflex_echo/reward/mean@{VAL_SAMPLES}"


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
    #: ``echo`` or ``mixed``; ``None``: mixed for mechanism curriculum, echo otherwise.
    task: str | None = None
    #: Validate every N steps (and before training); 0 never; ``None``: every 3 steps for curriculum, else 0.
    val_every: int | None = None

    @property
    def toy_task(self) -> str:
        return self.task or (CURRICULUM_TASK if self.mechanism == "curriculum" else "echo")

    @property
    def validation_interval(self) -> int:
        return self.val_every if self.val_every is not None else (3 if self.mechanism == "curriculum" else 0)

    def overrides(self) -> list[str]:
        """verl overrides of both arms: validation (when on), then ``extra_overrides``."""
        out = []
        if self.validation_interval:
            out += [
                f"trainer.test_freq={self.validation_interval}",
                "trainer.val_before_train=true",
                "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
                f"actor_rollout_ref.rollout.val_kwargs.n={VAL_SAMPLES}",
            ]
        return out + list(self.extra_overrides)

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
        if self.mechanism == "curriculum":
            block["prompt_key"] = "index"  # verl copies each row's extra_info.index into it
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
    task, train_rows = settings.toy_task, CURRICULUM_TRAIN_ROWS if settings.toy_task == "mixed" else 256
    if task == "mixed":
        say(
            f"task: {train_rows} prompts, half echo prompts, a quarter already solved (reward 1 whatever the answer), "
            "a quarter unsolvable (reward 0): their groups all agree, so uniform sampling spends half its rollouts "
            "on zero advantages"
        )
    if settings.validation_interval:
        say(f"validation every {settings.validation_interval} steps on echo prompts, {VAL_SAMPLES} samples each")
    say(demo_report.TOY_RUN_NOTE)
    workspace = runner.prepare_workspace(
        workdir / f"workspace_{task}" if task != "echo" else workdir / "workspace",
        model_seed=settings.seed,
        data_seed=settings.seed,
        task=task,
        train_rows=train_rows,
    )
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
                extra=settings.overrides(),
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
            "task": task,
            "train_prompts": train_rows,
            "validation_every": settings.validation_interval,
            "dataflex_verl": __version__,
            "wall_s": round(time.perf_counter() - started, 1),
        },
    )
    title = (
        f"verl GRPO on the CPU, toy echo task: {block['mechanism']} "
        f"{block['scorer']['name']} -> {block['actuator']['name']}\n(loss_agg_mode={settings.loss_agg_mode}, {settings.steps} steps, seed {settings.seed})"
    )
    validated = settings.validation_interval > 0
    spec = runner.RunSpec()
    demo_report.finish(
        document,
        # with validation, the arms are judged on it: a curriculum's batch reward is of other prompts
        names=demo_report.HostMetrics(reward=VAL_REWARD, step_time=METRICS.step_time) if validated else METRICS,
        baseline="sync",
        title=title,
        json_path=settings.json_path,
        plot_path=settings.plot_path or workdir / "demo.png",
        say=say,
        rollouts_per_step=spec.prompts_per_step * spec.samples_per_prompt if validated else None,
    )
    say(
        f"\n{demo_report.TOY_RUN_NOTE}\nwall time {time.perf_counter() - started:.0f} s; verl's logs under {workdir / 'logs'}"
    )
    return document
