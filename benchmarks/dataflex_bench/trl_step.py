"""Case ``trl``: TRL's training step with DataFlex over the same step without it.

Both arms are real ``GRPOTrainer.train()`` runs on the CPU: a tiny random
Qwen2 on the toy echo task, the same seed, TRL's own ``step_time`` per
optimizer step (generation, reward, advantages, DataFlex's hook, loss,
backward, optimizer). The learning rate is 0, so the policy never moves and
both arms generate the same completions at every step: the arms do the same
work but for DataFlex's, instead of drifting apart (a reweighted policy soon
writes longer or shorter completions, which would dominate the comparison).
The arms alternate in short runs so the machine's load falls on both alike;
the ratio is the median step time of the DataFlex arm over the baseline's
(each run's first step, the warm-up, left out). The pair is the default one
(``advantage_magnitude`` -> ``softmax``), which needs no extra forward pass.

Needs ``dataflex_trl`` and TRL; without them the case is a ``skip`` row.
"""

from __future__ import annotations

import importlib.util
import statistics
import warnings

from .results import Result, measured

TRL_TARGET = 1.05
PAIR = {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}}


def trl_missing() -> str | None:
    """Why the TRL case cannot run here, or None."""
    for module, dist in (("dataflex_trl", "dataflex-trl"), ("trl", "trl")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {dist}); TRL step time not measured"
    return None


def _step_times(dataflex: bool, steps: int, prompts: int, generations: int, length: int, seed: int) -> list[float]:
    """TRL's ``step_time`` of each optimizer step of one short run, the first (warm-up) step left out."""
    import os
    import tempfile

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from dataflex_trl import DataFlexGRPOTrainer
    from dataflex_trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset
    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    hf_logging.set_verbosity_error()
    tokenizer = char_tokenizer()
    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = GRPOConfig(output_dir=out, per_device_train_batch_size=prompts * generations,
                          num_generations=generations, max_completion_length=length, max_steps=steps,
                          logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                          seed=seed, learning_rate=0.0)  # fmt: skip
        kwargs = dict(model=tiny_model(tokenizer, seed=seed), reward_funcs=echo_reward, args=args,
                      train_dataset=toy_dataset(prompts * steps, seed=seed), processing_class=tokenizer)  # fmt: skip
        trainer = DataFlexGRPOTrainer(dataflex=PAIR, **kwargs) if dataflex else GRPOTrainer(**kwargs)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    return times[1:]


def run_trl(*, quick: bool, unjudged: str | None = None, progress=print) -> list[Result]:
    prompts, generations, length = (4, 4, 8) if quick else (16, 8, 32)
    rounds, steps = (1, 3) if quick else (4, 6)
    shape = f"{prompts} prompts x {generations} completions, up to {length} tokens"
    name = "DataFlexGRPOTrainer / GRPOTrainer step"
    reason = trl_missing()
    if reason:
        progress(f"  SKIP trl step: {reason}")
        return [Result("trl", name, shape, status="skip", target=TRL_TARGET, note=reason)]
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(rounds):
        for dataflex in (False, True) if r % 2 == 0 else (True, False):  # alternate which arm runs first
            times[dataflex] += _step_times(dataflex, steps, prompts, generations, length, seed=r)
        progress(
            f"  trl round {r + 1}/{rounds}: baseline {statistics.median(times[False]):.3f} s, "
            f"dataflex {statistics.median(times[True]):.3f} s per step so far"
        )
    base, flex = statistics.median(times[False]), statistics.median(times[True])
    return [
        measured(
            "trl",
            name,
            shape,
            median_s=flex,
            baseline_s=base,
            ratio=flex / base,
            target=TRL_TARGET,
            reps=len(times[True]),
            unjudged=unjudged,
            note="TRL's step_time per optimizer step, arms alternating; pair advantage_magnitude -> softmax",
        )
    ]
