"""A task family's held-out score in TRL's terms: every prompt sampled with a fixed seed at the rollout temperature.

TRL's own ``evaluate`` samples the held-out prompts from the global random stream, which every arm advances
differently (a curriculum draws other prompts, a filter more of them), so two arms with the same model get
different scores and the difference of their curves carries that noise. Here each held-out prompt gets
``samples`` completions drawn with a seed fixed per run seed (:func:`score_prompts` forks the random state, so
training's stream is untouched): the same model gives the same score every time, and the arms of one seed are
scored with the same draws (common random numbers). The sampling is TRL's rollout sampling (temperature, top-p,
top-k, min-p and repetition penalty of the run's ``GRPOConfig``, up to its ``max_completion_length``), so the
score is what the policy does, not its greedy answer. With the family's ``held_out_prompts: "all"``
(:mod:`dataflex_lab.task_families`) the prompts themselves are fixed too: every held-out tag x letter x level once,
the same for every seed, so what is left of a score's spread across seeds is the model's.

:func:`step0_profile` uses the same scorer on a fresh model: what a uniform policy meets at step 0.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import task_families

#: The metric the held-out score is logged under, and its per-level breakdown (``held_out/reward_d<level>``).
METRIC = "held_out/reward"
LEVEL_METRIC = "held_out/reward_d{}"
#: Completions per held-out prompt.
SAMPLES = 8


def eval_seed(run_seed: int) -> int:
    """The sampling seed of a run's held-out scores: fixed for the run, the same for every arm of its seed."""
    return int.from_bytes(hashlib.blake2b(f"held-out|{run_seed}".encode(), digest_size=6).digest(), "big")


@dataclass(frozen=True)
class Sampling:
    """How completions are drawn: the rollout's settings (TRL's ``GRPOConfig`` fields of the same names)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    @classmethod
    def of(cls, args: Any) -> Sampling:
        """The sampling of a ``GRPOConfig``."""
        return cls(args.max_completion_length, args.temperature, args.top_p, args.top_k or 0, args.min_p,
                   args.repetition_penalty)  # fmt: skip


def score_prompts(model: Any, tokenizer: Any, task: task_families.TaskFamily,
                  prompts: Sequence[task_families.TaskPrompt], *, samples: int, seed: int,
                  sampling: Sampling) -> Any:  # fmt: skip
    """``(len(prompts), samples)`` rewards: each prompt's completions under the family's rule, drawn with ``seed``.

    Prompts are generated in groups of one length (no padding, so a prompt's completions do not depend on its
    neighbours); the global random state is restored afterwards.
    """
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=sampling.max_new_tokens,
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        min_p=sampling.min_p,
        repetition_penalty=sampling.repetition_penalty,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    rewards = torch.zeros(len(prompts), samples, dtype=torch.float64)
    by_length: dict[int, list[int]] = {}
    encoded = [tokenizer(p.text, add_special_tokens=False)["input_ids"] for p in prompts]
    for index, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(index)
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for length, indices in sorted(by_length.items()):
                ids = torch.tensor([encoded[i] for i in indices]).repeat_interleave(samples, dim=0)
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
                texts = tokenizer.batch_decode(out[:, length:], skip_special_tokens=True)
                for row, text in enumerate(texts):
                    prompt = indices[row // samples]
                    rewards[prompt, row % samples] = task.reward(text, prompts[prompt].answer)
    finally:
        model.train(was_training)
    return rewards


def summarize(rewards: Any, prompts: Sequence[task_families.TaskPrompt]) -> dict[str, float]:
    """The mean held-out reward and its mean per difficulty level (the metrics :data:`METRIC` and per level)."""
    out = {METRIC: float(rewards.mean())}
    levels = sorted({p.difficulty for p in prompts if p.difficulty is not None})
    for level in levels:
        rows = [i for i, p in enumerate(prompts) if p.difficulty == level]
        out[LEVEL_METRIC.format(level)] = float(rewards[rows].mean())
    return out


def evaluation_callback(task: task_families.TaskFamily, prompts: Sequence[task_families.TaskPrompt], *,
                        every: int, run_seed: int, samples: int = SAMPLES,
                        temperature: float | None = None) -> Any:  # fmt: skip
    """A ``TrainerCallback`` that scores ``prompts`` before training and every ``every`` steps (and at the last),
    keeping ``{step: metrics}`` in its ``scores``; ``temperature``: the evaluation's own (``None``: the rollout's)."""
    from transformers import TrainerCallback

    def sampling(args: Any) -> Sampling:
        rollout = Sampling.of(args)
        return rollout if temperature is None else replace(rollout, temperature=temperature)

    class HeldOutEvaluation(TrainerCallback):
        def __init__(self) -> None:
            self.scores: dict[int, dict[str, float]] = {}

        def _score(self, args: Any, state: Any, kwargs: dict[str, Any]) -> None:
            rewards = score_prompts(kwargs["model"], kwargs["processing_class"], task, prompts, samples=samples,
                                    seed=eval_seed(run_seed), sampling=sampling(args))  # fmt: skip
            self.scores[int(state.global_step)] = summarize(rewards, prompts)

        def on_train_begin(self, args, state, control, **kwargs):
            self._score(args, state, kwargs)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                self._score(args, state, kwargs)

        def on_train_end(self, args, state, control, **kwargs):
            if int(state.global_step) not in self.scores:  # stopped early (the rollout budget): score where it ended
                self._score(args, state, kwargs)

    return HeldOutEvaluation()


def merge_scores(records: list[dict[str, Any]], scores: dict[int, dict[str, float]]) -> list[dict[str, Any]]:
    """``records`` (``{"step", "metrics"}``, TRL's logs) with each step's held-out metrics added (a record of its
    own for step 0, before training)."""
    by_step = {record["step"]: record for record in records}
    for step, metrics in scores.items():
        if step in by_step:
            by_step[step]["metrics"].update(metrics)
        else:
            by_step[step] = {"step": step, "metrics": dict(metrics)}
    return [by_step[step] for step in sorted(by_step)]


def step0_profile(task: task_families.TaskFamily, structure: task_families.Structure, seed: int,
                  samples: int = SAMPLES) -> dict[str, Any]:  # fmt: skip
    """What a uniform policy meets at step 0: a fresh model (the campaign's, ``seed``) samples every train prompt
    ``samples`` times at temperature 1; the share of zero-variance groups (every reward equal: no GRPO signal),
    overall, per kind and per level, and the held-out score."""
    from .toy import FAMILY_MODEL, family_tokenizer, tiny_model

    splits = task.build(structure, seed)
    tokenizer = family_tokenizer(task)
    model = tiny_model(tokenizer, seed=seed, spec=FAMILY_MODEL)
    sampling = Sampling(max_new_tokens=task.response_length(structure))
    rewards = score_prompts(model, tokenizer, task, splits.train, samples=samples, seed=eval_seed(seed),
                            sampling=sampling)  # fmt: skip
    flat = (rewards.max(dim=1).values == rewards.min(dim=1).values).tolist()

    def share(rows: list[int]) -> float | None:
        return statistics.fmean(flat[i] for i in rows) if rows else None

    kinds = {kind: share([i for i, p in enumerate(splits.train) if p.kind == kind]) for kind in task_families.KINDS}
    levels = sorted({p.difficulty for p in splits.train if p.kind == "learnable"})
    learnable = {
        str(d): share([i for i, p in enumerate(splits.train) if p.kind == "learnable" and p.difficulty == d])
        for d in levels
    }
    held = score_prompts(model, tokenizer, task, splits.held_out, samples=samples, seed=eval_seed(seed),
                         sampling=sampling)  # fmt: skip
    return {
        "zero_variance_share": statistics.fmean(flat),
        "by_kind": kinds,
        "learnable_by_level": learnable,
        "held_out_reward": float(held.mean()),
        "samples": samples,
    }
