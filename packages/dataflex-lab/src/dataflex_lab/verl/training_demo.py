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

``--mechanism filter`` and ``--mechanism pilot`` (screen with pilot rollouts, commit the rest to the prompts with
signal) run on verl's legacy trainer (``--trainer legacy``), on the mixed task; elsewhere the demo refuses them
before starting verl, with verl's reason.

``--task repeat|count`` (``--task-params JSON``) trains on a task family
(:mod:`dataflex_lab.task_families`): its train prompts as verl's train files,
its binary rule as the reward (:func:`dataflex_lab.verl.cpu_loop.task.compute_score`),
and its held-out split as verl's validation files, which verl's own
``_validate`` scores every ``--val-every`` steps (``trainer.test_freq``) under
``val-aux/dataflex_<family>/reward/mean@8``: the metric the arms are compared on.
Every arm logs the ``dataflex/compute/*`` counters (the baseline through the
harness, :attr:`~dataflex_lab.verl.cpu_loop.runner.RunSpec.compute_counters`),
so ``dataflex compare --x rollouts`` reads the ``--json``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from dataflex_verl import __version__ as host_version

from .. import demo_report, task_families
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


def samples_per_prompt(settings: demo_report.DemoOptions) -> int:
    """Responses per prompt, in training and validation: a task family's binary reward needs more of them."""
    from .cpu_loop.runner import RunSpec

    return demo_report.FAMILY_SAMPLES if settings.task_family is not None else RunSpec.samples_per_prompt


def validation_samples(settings: demo_report.DemoOptions) -> int:
    """Responses per validation prompt: :data:`VAL_SAMPLES`, or on a task family as many as in training."""
    return VAL_SAMPLES if settings.task_family is None else samples_per_prompt(settings)


def validation_metric(settings: demo_report.DemoOptions) -> str:
    """The metric verl's ``_validate`` logs the validation reward under, for this task."""
    if settings.task_family is None:
        return VAL_REWARD
    from .cpu_loop.task import family_source

    return f"val-aux/{family_source(settings.toy_task)}/reward/mean@{validation_samples(settings)}"


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
                f"actor_rollout_ref.rollout.val_kwargs.n={validation_samples(self)}",
            ]
        return out + list(self.extra_overrides)


def train_prompts(settings: demo_report.DemoOptions) -> int:
    """Prompts in the train set: a task family's ``train_prompts``, the mixed task's few, or the echo task's 256."""
    if settings.task_family is not None:
        return task_families.structure_from(settings.task_params, settings.task_family).train_prompts
    return demo_report.CURRICULUM_TRAIN_ROWS if settings.toy_task == "mixed" else 256


def task_lines(settings: demo_report.DemoOptions) -> list[str]:
    """What the demo says about its task and its validation before the first arm starts."""
    lines, family = [], settings.task_family
    if family is not None:
        splits = family.build(task_families.structure_from(settings.task_params, family), settings.seed)
        lines.append(f"task {settings.toy_task} (binary rule reward): {json.dumps(task_families.describe(splits))}")
    if settings.toy_task == "mixed":
        lines.append(
            f"task: {train_prompts(settings)} prompts, half echo prompts, a quarter already solved (reward 1 whatever "
            "the answer), a quarter unsolvable (reward 0): their groups all agree, so uniform sampling spends half "
            "its rollouts on zero advantages"
        )
    if settings.validation_interval:
        where = "the held-out split" if family is not None else "echo prompts"
        lines.append(
            f"validation every {settings.validation_interval} steps on {where}, {validation_samples(settings)} "
            "samples each"
        )
    return lines


def seed_workspace(settings: demo_report.DemoOptions, workdir: Path, seed: int) -> Any:
    """The model (seeded by ``seed``) and the task's files both arms of ``seed`` train on."""
    from .cpu_loop import runner

    return runner.prepare_workspace(
        workdir / f"workspace_{settings.toy_task}_seed{seed}",
        model_seed=seed,
        # a task family's prompts are drawn per seed, as in TRL's demo; the echo tasks' from the first seed
        data_seed=seed if settings.task_family is not None else settings.seed,
        task=settings.toy_task,
        train_rows=train_prompts(settings),
        task_params=settings.task_params,
    )


def check_trainer_line(settings: DemoSettings) -> None:
    """Refuse before any run a mechanism the chosen trainer line cannot carry, with verl's reason and the fix.

    ``filter`` and ``pilot`` generate within a step where ``RayPPOTrainer.fit`` pulls its prompts; V1 and the
    one-step-off trainer refuse them at mount, which a demo would report only after starting verl.
    """
    from dataflex_verl.mount import REFILL_REASONS, STAGED_REASONS

    reasons = {
        "v1": {"filter": REFILL_REASONS["v1"], "pilot": STAGED_REASONS["v1"]},
        "one-step-off": {"filter": REFILL_REASONS["one_step_off"], "pilot": REFILL_REASONS["one_step_off"]},
    }
    reason = reasons.get(settings.trainer, {}).get(settings.mechanism)
    if reason is not None:
        raise ValueError(
            f"--mechanism {settings.mechanism} does not run on verl's {settings.trainer} trainer line: {reason}. "
            "Add --trainer legacy (verl's RayPPOTrainer, trainer.use_v1=false)"
        )


def run_training_demo(settings: DemoSettings, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Train every arm for every seed; print progress, the summary table (and the comparison); return the document."""
    from .cpu_loop import runner

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    block = settings.block()
    check_trainer_line(settings)
    demo_report.check_components(block)
    started = time.perf_counter()
    workdir = Path(settings.workdir).resolve()
    arms = ARMS_BY_LINE[settings.trainer]
    task, train_rows, samples = settings.toy_task, train_prompts(settings), samples_per_prompt(settings)
    say(
        f"dataflex-verl {host_version} training demo: verl's GRPO fit loop on the CPU ({settings.trainer} trainer "
        f"line), tiny random Qwen2, task {task}; {settings.steps} steps x {len(arms)} arms x {settings.seeds} "
        f"seed(s), loss_agg_mode={settings.loss_agg_mode}, {runner.RunSpec.prompts_per_step} prompts x {samples} "
        "responses per step"
    )
    say(f"DataFlex arm: {json.dumps(block)}")
    for line in task_lines(settings):
        say(line)
    say(demo_report.TOY_RUN_NOTE)
    runs: list[dict[str, Any]] = []
    for seed in settings.seed_list():
        # each seed starts from its own random model; both arms of a seed from the same one, on the same prompts
        workspace = seed_workspace(settings, workdir, seed)
        for arm in arms:
            spec = runner.RunSpec(
                trainer_mode=arm if settings.trainer == "v1" else "sync",
                use_v1=settings.trainer == "v1",
                entry_point="one_step_off" if settings.trainer == "one-step-off" else "main_ppo",
                dataflex=block if arm != arms[0] else None,
                steps=settings.steps,
                seed=seed,
                samples_per_prompt=samples,
                # the baseline arm's dataflex/compute/* counters come from the harness (DataFlex logs its own)
                compute_counters=arm == arms[0],
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
            say(demo_report.arm_done_line(arm, seed, steps, time.perf_counter() - arm_start))
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
            "task_params": settings.task_params,
            "train_prompts": train_rows,
            "prompts_per_step": runner.RunSpec.prompts_per_step,
            "samples_per_prompt": samples,
            "validation_every": settings.validation_interval,
            "dataflex_verl": host_version,
            "dataflex_lab": lab_version,
            "wall_s": round(time.perf_counter() - started, 1),
        },
    )
    title = (
        f"verl GRPO on the CPU, task {task}: {block['mechanism']} "
        f"{block['scorer']['name']} -> {block['actuator']['name']}\n(loss_agg_mode={settings.loss_agg_mode}, {settings.steps} steps, seed {settings.seed})"
    )
    validated = settings.validation_interval > 0
    prompts = runner.RunSpec.prompts_per_step
    demo_report.finish(
        document,
        # with validation, the arms are judged on it: a curriculum's batch reward is of other prompts
        names=demo_report.HostMetrics(reward=validation_metric(settings), step_time=METRICS.step_time)
        if validated
        else METRICS,
        baseline=arms[0],
        title=title,
        json_path=settings.json_path,
        plot_path=settings.plot_path or workdir / settings.plot_name(),
        say=say,
        rollouts_per_step=prompts * samples if validated else None,
        group_size=samples,
    )
    say(
        f"\n{demo_report.TOY_RUN_NOTE}\nwall time {time.perf_counter() - started:.0f} s; verl's logs under {workdir / 'logs'}"
    )
    return document
