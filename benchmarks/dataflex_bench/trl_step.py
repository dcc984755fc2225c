"""Case ``trl``: TRL's training step with DataFlex over the same step without it — target <= 1.05.

Trainers built alike (a tiny random Qwen2 on the lab's toy echo task, the same seed) each run TRL's own
``training_step`` (generation, reward, advantages, DataFlex's hook, loss, backward) on their own batches, in an
order that rotates every step, so a shared machine's load falls on all alike. The learning rate is 0 and sampling
is seeded per step, so they do the same work but for DataFlex's. Rows: the default pair
(``advantage_magnitude`` -> ``softmax``) and ``mechanism: filter`` with every group admitted and the ledger on
(the admission decision and the ledger's record per step), each the median step over TRL's own (the warm-up step
left out). Needs ``dataflex_trl`` and TRL; otherwise a ``skip`` row.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
import warnings

from .results import Result, measured, skipped

TRL_TARGET = 1.05
PAIR = {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}}
#: mechanism filter admitting every group (variance >= 0 > -1), feeding the ledger: one round, as TRL's.
ADMISSION = {
    "mechanism": "filter", "prompt_key": "index", "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}},
}  # fmt: skip
#: The arms: TRL's own step (None) and DataFlex's blocks, by name.
ARMS = {"plain": None, "reweight": PAIR, "admission": ADMISSION}


def trl_missing() -> str | None:
    """Why the TRL case cannot run here, or None."""
    for module, dist in (("dataflex_trl", "dataflex-trl"), ("trl", "trl")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {dist}); TRL step time not measured"
    return None


def _trainers(prompts: int, generations: int, length: int, out: str) -> dict:
    """Each arm's trainer (:data:`ARMS`) built alike, ready for ``training_step``, with its batch iterator."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from dataflex_trl import DataFlexGRPOTrainer
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset

    hf_logging.set_verbosity_error()
    tokenizer = char_tokenizer()
    built = {}
    for arm, dataflex in ARMS.items():
        args = GRPOConfig(output_dir=os.path.join(out, arm), per_device_train_batch_size=prompts * generations,
                          num_generations=generations, max_completion_length=length, learning_rate=0.0,
                          report_to=[], use_cpu=True, disable_tqdm=True, seed=0)  # fmt: skip
        kwargs = dict(model=tiny_model(tokenizer, seed=0), reward_funcs=echo_reward, args=args,
                      train_dataset=toy_dataset(prompts * 64, seed=0), processing_class=tokenizer)  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = DataFlexGRPOTrainer(dataflex=dataflex, **kwargs) if dataflex else GRPOTrainer(**kwargs)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        built[arm] = (trainer, iter(trainer.get_train_dataloader()))
    return built


def _timed_step(trainer, batches, seed: int) -> float:
    """One ``training_step`` on the trainer's next batch, sampling seeded by ``seed``; its wall time."""
    import torch

    inputs = next(batches)
    trainer.model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # both trainers sample the same completions at the same step
    start = time.perf_counter()
    trainer.training_step(trainer.model, inputs, None)
    return time.perf_counter() - start


def run_trl(*, quick: bool, unjudged: str | None = None, progress=print) -> list[Result]:
    prompts, generations, length = (4, 4, 8) if quick else (16, 8, 32)
    steps = 3 if quick else 24
    shape = f"{prompts} prompts x {generations} completions, up to {length} tokens"
    name = "DataFlexGRPOTrainer / GRPOTrainer step"
    reason = trl_missing()
    if reason:
        progress(f"  SKIP trl step: {reason}")
        return [skipped("trl", name, shape, reason, TRL_TARGET)]
    import tempfile

    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    arm_names = list(ARMS)
    with tempfile.TemporaryDirectory() as out:
        arms = _trainers(prompts, generations, length, out)
        for step in range(steps + 1):
            shift = step % len(arm_names)  # rotate who goes first every step
            for arm in arm_names[shift:] + arm_names[:shift]:
                took = _timed_step(*arms[arm], seed=step)
                if step > 0:  # the first step of each trainer is its warm-up
                    times[arm].append(took)
            if step and step % max(1, steps // 4) == 0:
                medians = ", ".join(f"{arm} {statistics.median(times[arm]):.3f} s" for arm in arm_names)
                progress(f"  trl step {step}/{steps}: {medians} (medians so far)")
        hooks = {arm: arms[arm][0]._metrics["train"]["dataflex/hook_time_s"][1:] for arm in arm_names if ARMS[arm]}
    base = statistics.median(times["plain"])
    rows = {
        "reweight": (name, "TRL's training_step, the trainers alternating; pair advantage_magnitude -> softmax"),
        "admission": (
            "DataFlexGRPOTrainer filter (every group admitted) + ledger / GRPOTrainer step",
            "mechanism filter admitting every group (one round, as TRL's) with the ledger on",
        ),
    }
    out_rows = []
    for arm, (label, note) in rows.items():
        median, hook = statistics.median(times[arm]), statistics.median(hooks[arm]) if hooks[arm] else None
        out_rows.append(
            measured(
                "trl",
                label,
                shape,
                median_s=median,
                baseline_s=base,
                ratio=median / base,
                target=TRL_TARGET,
                reps=len(times[arm]),
                unjudged=unjudged,
                note=note,
                extra={"hook_median_s": hook},
            )  # fmt: skip
        )
    return out_rows
