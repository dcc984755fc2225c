"""``dataflex-trl demo``: train with TRL's own GRPO loop on the CPU, the baseline against DataFlex.

Each arm is a real ``trainer.train()`` of TRL's ``GRPOTrainer`` (generation,
reward, advantages, loss, optimizer step) on a tiny random Qwen2 learning the
toy echo task (:mod:`dataflex_lab.trl.toy`). The arms share the seed, so they start
from the same model and draw the same prompts; ``baseline`` is TRL's plain
trainer, ``dataflex`` is :class:`~dataflex_trl.DataFlexGRPOTrainer` with the
configured scorer and actuator. Output: a line per step, a summary table, a
PNG plot and, with ``--json``, every metric TRL logged (format
``dataflex-demo/1``, read by ``dataflex compare``).

A toy run shows the mechanics (weights reach the loss, their statistics, what
they cost) and a direction; it is not a benchmark result.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dataflex_trl import __version__ as host_version

from .. import compute, demo_report, task_families, toy_task
from ..version import __version__ as lab_version

#: The baseline arm and the DataFlex arm.
ARMS = ("baseline", "dataflex")
#: TRL's names for the step's mean reward and step time.
METRICS = demo_report.HostMetrics(reward="reward", step_time="step_time")
#: Prompts per step and completions per prompt (a generation batch of 32 completions).
PROMPTS_PER_STEP, GENERATIONS = 8, 4
#: Completions per prompt on a task family (both demos').
FAMILY_GENERATIONS = demo_report.FAMILY_SAMPLES
#: TRL's name for the evaluation reward (on echo prompts, ``GENERATIONS`` completions each).
EVAL_REWARD = "eval_reward"


@dataclass
class DemoSettings(demo_report.DemoOptions):
    """What ``dataflex-trl demo`` runs: the demos' common options plus TRL's ``loss_type``."""

    workdir: Path = Path("dataflex_trl_demo")
    loss_type: str = "dapo"
    #: The task family model's initial weight scale (``None``: its spec's, 0.1) and the rollout temperature
    #: (TRL's ``GRPOConfig.temperature``): settings the evidence campaign varies.
    init_scale: float | None = None
    temperature: float = 1.0


def grpo_config(settings: DemoSettings, arm: str, seed: int) -> Any:
    """The ``GRPOConfig`` of one run of ``arm``: TRL's defaults, the task's sizes, one log per step."""
    from trl import GRPOConfig

    task = settings.task_family
    generations = FAMILY_GENERATIONS if task is not None else GENERATIONS
    if task is not None:
        completion_length = task.response_length(task_families.structure_from(settings.task_params, task))
    else:
        completion_length = toy_task.SCORED_CHARS
    return GRPOConfig(
        output_dir=str(settings.workdir / "runs" / f"{arm}_seed{seed}"),
        per_device_train_batch_size=PROMPTS_PER_STEP * generations,
        num_generations=generations,
        max_completion_length=completion_length,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        temperature=settings.temperature,
        loss_type=settings.loss_type,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=seed,
        **_checkpointing(GRPOConfig),
        **(
            {
                "eval_strategy": "steps",
                "eval_steps": settings.validation_interval,
                "eval_on_start": True,
                "per_device_eval_batch_size": PROMPTS_PER_STEP * generations,
            }
            if settings.validation_interval
            else {}
        ),
    )


def _checkpointing(config: type) -> dict[str, Any]:
    """TRL's activation checkpointing under the name transformers 5 reads.

    TRL's config sets ``gradient_checkpointing=True``, which transformers 5 renamed ``activation_checkpointing``:
    it warns (a ``FutureWarning``) on every config, once per arm and seed. Naming the new field keeps TRL's
    choice and the warning away; older transformers have no such field and get nothing.
    """
    import dataclasses

    names = {f.name for f in dataclasses.fields(config)}
    return {"activation_checkpointing": True} if "activation_checkpointing" in names else {}


def family_model_spec(init_scale: float | None) -> Any:
    """The task families' model, its initial weights drawn at ``init_scale`` (``None``: the spec's own)."""
    from dataclasses import replace

    from .toy import FAMILY_MODEL

    return FAMILY_MODEL if init_scale is None else replace(FAMILY_MODEL, initializer_range=init_scale)


def train_arm(
    settings: DemoSettings, arm: str, seed: int, on_step: Any, callbacks: Sequence[Any] = ()
) -> list[dict[str, Any]]:
    """One real TRL training run of ``arm``; every step's logged metrics as ``{"step", "metrics"}`` records.

    ``callbacks``: more ``TrainerCallback`` objects for the trainer (the evidence campaign's held-out scorer).
    """
    from dataflex_trl import DataFlexGRPOTrainer
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from .toy import (
        char_tokenizer,
        echo_reward,
        family_dataset,
        family_reward,
        family_tokenizer,
        tiny_model,
        toy_dataset,
    )

    records: list[dict[str, Any]] = []

    generations = FAMILY_GENERATIONS if settings.task_family is not None else GENERATIONS
    counters = compute.ComputeTotals()

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            numbers = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            if METRICS.reward in numbers:
                numbers.update(counters.step(numbers, PROMPTS_PER_STEP * generations))
                records.append({"step": int(state.global_step), "metrics": numbers})
                on_step(records[-1])
            elif EVAL_REWARD in numbers:  # TRL logs an evaluation after the step's own log
                if records and records[-1]["step"] == int(state.global_step):
                    records[-1]["metrics"].update(numbers)
                else:
                    records.append({"step": int(state.global_step), "metrics": numbers})
                on_step({"step": int(state.global_step), "metrics": numbers})

    task = settings.task_family
    if task is not None:
        splits = task.build(task_families.structure_from(settings.task_params, task), seed)
        tokenizer = family_tokenizer(task)
    else:
        tokenizer = char_tokenizer()
    args = grpo_config(settings, arm, seed)
    if task is not None:  # train on every kind, evaluate on the held-out split of the learnable band
        data = {
            "model": tiny_model(tokenizer, seed=seed, spec=family_model_spec(settings.init_scale)),
            "reward_funcs": family_reward(task),
            "train_dataset": family_dataset(splits.train),
            "eval_dataset": family_dataset(splits.held_out) if settings.validation_interval else None,
        }
    else:
        mixed = settings.toy_task == "mixed"
        data = {
            "model": tiny_model(tokenizer, seed=seed),
            "reward_funcs": echo_reward,
            "train_dataset": toy_dataset(
                demo_report.CURRICULUM_TRAIN_ROWS if mixed else PROMPTS_PER_STEP * settings.steps,
                seed=seed,
                task=settings.toy_task,
            ),
            # evaluation on echo prompts only: the skill the mixed task's constant prompts cannot teach
            "eval_dataset": toy_dataset(4 * PROMPTS_PER_STEP, seed=seed + 1) if settings.validation_interval else None,
        }
    kwargs = dict(**data, args=args, processing_class=tokenizer, callbacks=[Record(), *callbacks])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = (
            GRPOTrainer(**kwargs) if arm == "baseline" else DataFlexGRPOTrainer(dataflex=settings.block(), **kwargs)
        )
        # without tqdm, transformers prints every log dict; the demo's own progress line says what matters
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return records


def run_training_demo(settings: DemoSettings, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Train every arm for every seed; print progress, the summary table (and the comparison); return the document."""
    import trl
    from transformers.utils import logging as hf_logging

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_logging.set_verbosity_error()
    block = settings.block()
    demo_report.check_components(block)  # a typo fails now, not after the first arm
    started = time.perf_counter()
    say(
        f"dataflex-trl {host_version} training demo: TRL {trl.__version__} GRPOTrainer on the CPU, tiny random "
        f"Qwen2, task {settings.toy_task}; {settings.steps} steps x {len(ARMS)} arms x {settings.seeds} seed(s), "
        f"loss_type={settings.loss_type}, {PROMPTS_PER_STEP} prompts x {GENERATIONS} completions per step"
    )
    say(f"DataFlex arm: {json.dumps(block)}")
    if settings.toy_task == "mixed":
        say(
            f"task: {demo_report.CURRICULUM_TRAIN_ROWS} prompts, half echo prompts, a quarter already solved (reward 1 whatever the "
            "answer), a quarter unsolvable (reward 0): uniform sampling spends half its rollouts on zero advantages"
        )
    generations = FAMILY_GENERATIONS if settings.task_family is not None else GENERATIONS
    if settings.task_family is not None:
        splits = settings.task_family.build(task_families.structure_from(settings.task_params, settings.task_family), 0)
        say(f"task {settings.toy_task} (binary rule reward): {json.dumps(task_families.describe(splits))}")
    if settings.validation_interval:
        where = "the held-out split" if settings.task_family is not None else "echo prompts"
        say(f"evaluation every {settings.validation_interval} steps on {where}, {generations} completions each")
    say(demo_report.TOY_RUN_NOTE)
    runs: list[dict[str, Any]] = []
    for seed in settings.seed_list():
        for arm in ARMS:
            say(f"\n{arm}, seed {seed}:")
            arm_start = time.perf_counter()

            def on_step(record: dict[str, Any], arm: str = arm, seed: int = seed) -> None:
                say(demo_report.progress_line(arm, seed, settings.steps, record, METRICS))

            steps = train_arm(settings, arm, seed, on_step)
            say(demo_report.arm_done_line(arm, seed, steps, time.perf_counter() - arm_start))
            runs.append({"arm": arm, "seed": seed, "steps": steps})
    document = demo_report.demo_document(
        "trl",
        settings.seed_list(),
        runs,
        {
            "dataflex": block,
            "steps": settings.steps,
            "loss_type": settings.loss_type,
            "lr": settings.learning_rate,
            "prompts_per_step": PROMPTS_PER_STEP,
            "num_generations": FAMILY_GENERATIONS if settings.task_family is not None else GENERATIONS,
            "task": settings.toy_task,
            "task_params": settings.task_params,
            "validation_every": settings.validation_interval,
            "trl": trl.__version__,
            "dataflex_trl": host_version,
            "dataflex_lab": lab_version,
            "wall_s": round(time.perf_counter() - started, 1),
        },
    )
    title = (
        f"TRL GRPO on the CPU, task {settings.toy_task}: {block['mechanism']} "
        f"{block['scorer']['name']} -> {block['actuator']['name']} (loss_type={settings.loss_type})"
    )
    validated = settings.validation_interval > 0
    demo_report.finish(
        document,
        # with evaluation, the arms are judged on it: a curriculum's batch reward is of other prompts
        names=demo_report.HostMetrics(reward=EVAL_REWARD, step_time=METRICS.step_time) if validated else METRICS,
        baseline="baseline",
        title=title,
        json_path=settings.json_path,
        plot_path=Path(settings.plot_path or Path(settings.workdir) / settings.plot_name()),
        say=say,
        rollouts_per_step=PROMPTS_PER_STEP * generations if validated else None,
        group_size=generations,
    )
    say(f"\n{demo_report.TOY_RUN_NOTE}\nwall time {time.perf_counter() - started:.0f} s")
    return document
