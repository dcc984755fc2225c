"""``dataflex-verl demo``: train with verl's own GRPO loop on the CPU, the baseline against DataFlex.

Each arm is a real run of ``python -m verl.trainer.main_ppo`` (rollout,
reward, old log-prob, advantage, actor update, weight sync) on the CPU
harness (:mod:`dataflex_lab.verl.cpu_loop`): a tiny random Qwen2 learning the toy
echo task. The arms share the seed, so they start from the same model and
draw the same prompts; ``sync`` is verl's plain trainer, ``dataflex_sync``
runs the configured scorer and actuator in ``_compute_advantage``.

A toy run shows the mechanics (weights reach the loss, their statistics, what
they cost) and a direction; it is not a benchmark result. With ``--seeds K``
the arms are compared over K seeds with :func:`dataflex_lab.compare.compare_runs`.

``--mechanism curriculum`` trains both arms on the toy task's mixed variant
(echo prompts beside prompts that are already solved or unsolvable, whose
rollouts teach nothing; :func:`dataflex_lab.toy_task.mixed_prompts`) and
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

from dataflex_verl import __version__ as host_version

from .. import demo_report
from ..version import __version__ as lab_version

#: The baseline arm and the DataFlex arm of each verl trainer line (``--trainer``): on V1 they are verl trainer
#: modes; on the legacy line both are verl's ``RayPPOTrainer`` (``trainer.use_v1=false``), and with
#: ``one-step-off`` its ``OneStepOffRayTrainer``, the second with a ``dataflex:`` block.
ARMS_BY_LINE = {
    "v1": ("sync", "dataflex_sync"),
    "legacy": ("legacy", "dataflex_legacy"),
    "one-step-off": ("one_step_off", "dataflex_one_step_off"),
}
#: verl's names for the step's mean reward and step time.
METRICS = demo_report.HostMetrics(reward="critic/score/mean", step_time="timing_s/step")
#: Responses per validation prompt (sampled at temperature 1, so the validation reward moves smoothly).
VAL_SAMPLES = 4
#: verl's validation reward of the toy task's prompts (``val-aux/<data_source>/reward/mean@<n>``; verl files the
#: same value under ``val-core/.../acc/...`` when the reward function's output has an ``acc``).
VAL_REWARD = f"val-aux/dataflex_echo/reward/mean@{VAL_SAMPLES}"


@dataclass
class DemoSettings(demo_report.DemoOptions):
    """What ``dataflex-verl demo`` runs: the demos' common options plus verl's loss mode and extra overrides."""

    workdir: Path = Path("dataflex_demo")
    loss_agg_mode: str = "token-mean"
    #: verl's trainer line: ``v1`` (trainer modes), ``legacy`` (``RayPPOTrainer``, ``trainer.use_v1=false``) or
    #: ``one-step-off`` (verl's ``OneStepOffRayTrainer``).
    trainer: str = "v1"
    extra_overrides: list[str] = field(default_factory=list)

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


def run_training_demo(settings: DemoSettings, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Train every arm for every seed; print progress, the summary table (and the comparison); return the document."""
    from .cpu_loop import runner

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    if settings.task_family is not None:
        raise ValueError(
            f"--task {settings.toy_task}: the task families run in TRL's demo for now (nox -s demo-trl -- --task "
            f"{settings.toy_task}); verl's demo trains the echo task and its mixed variant (--task echo|mixed)"
        )
    block = settings.block()
    demo_report.check_components(block)
    started = time.perf_counter()
    workdir = Path(settings.workdir).resolve()
    arms = ARMS_BY_LINE[settings.trainer]
    say(
        f"dataflex-verl {host_version} training demo: verl's GRPO fit loop on the CPU ({settings.trainer} trainer "
        f"line), tiny random Qwen2, toy echo task; {settings.steps} steps x {len(arms)} arms x {settings.seeds} "
        f"seed(s), loss_agg_mode={settings.loss_agg_mode}"
    )
    say(f"DataFlex arm: {json.dumps(block)}")
    task, train_rows = settings.toy_task, demo_report.CURRICULUM_TRAIN_ROWS if settings.toy_task == "mixed" else 256
    if task == "mixed":
        say(
            f"task: {train_rows} prompts, half echo prompts, a quarter already solved (reward 1 whatever the answer), "
            "a quarter unsolvable (reward 0): their groups all agree, so uniform sampling spends half its rollouts "
            "on zero advantages"
        )
    if settings.validation_interval:
        say(f"validation every {settings.validation_interval} steps on echo prompts, {VAL_SAMPLES} samples each")
    say(demo_report.TOY_RUN_NOTE)
    runs: list[dict[str, Any]] = []
    for seed in settings.seed_list():
        # each seed starts from its own random model; both arms of a seed from the same one, on the same prompts
        workspace = runner.prepare_workspace(
            workdir / f"workspace_{task}_seed{seed}",
            model_seed=seed,
            data_seed=settings.seed,
            task=task,
            train_rows=train_rows,
        )
        for arm in arms:
            spec = runner.RunSpec(
                trainer_mode=arm if settings.trainer == "v1" else "sync",
                use_v1=settings.trainer == "v1",
                entry_point="one_step_off" if settings.trainer == "one-step-off" else "main_ppo",
                dataflex=block if arm != arms[0] else None,
                steps=settings.steps,
                seed=seed,
                loss_agg_mode=settings.loss_agg_mode,
                lr=settings.learning_rate,
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
            "trainer_line": settings.trainer,
            "lr": settings.learning_rate,
            "task": task,
            "train_prompts": train_rows,
            "validation_every": settings.validation_interval,
            "dataflex_verl": host_version,
            "dataflex_lab": lab_version,
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
        baseline=arms[0],
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
