"""Helpers of the TRL host tests: real ``GRPOTrainer``s on a tiny model, offline, on the CPU.

The testing kit's toy components, registered here as ``trltest_constant``,
``trltest_reward`` and ``trltest_proportional``, cover what no shipped plugin
does on purpose: uniform weights, weights easy to recompute by hand.
"""

from __future__ import annotations

import copy
import os

import torch

import dataflex_conformance.host  # noqa: F401  (registers the host kit's hostkit_counter, a stateful scorer)
from dataflex_lab.testing import register_toy_components

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

#: Every loss type the host supports, with the GRPOConfig settings TRL recommends for it.
LOSS_TYPES = {
    "grpo": {},
    "bnpo": {},
    "dr_grpo": {},
    "dapo": {},
    "sapo": {},
    "cispo": {},
    "vespo": {},
    "luspo": {"importance_sampling_level": "sequence"},
}
PROMPTS_PER_STEP = 4
NUM_GENERATIONS = 4


register_toy_components("trltest")


UNIFORM = {
    "mechanism": "reweight",
    "scorer": {"name": "trltest_constant"},
    "actuator": {"name": "trltest_proportional"},
}
BY_REWARD = {
    "mechanism": "reweight",
    "scorer": {"name": "trltest_reward"},
    "actuator": {"name": "trltest_proportional"},
}


def grpo_config(tmp_path, loss_type: str = "dapo", **overrides):
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=PROMPTS_PER_STEP * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=6,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        loss_type=loss_type,
        seed=0,
        **LOSS_TYPES.get(loss_type, {}),
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def generate(trainer, inputs, seed: int = 0) -> dict:
    """TRL's real ``_generate_and_score_completions`` with the generator seeded (same completions per seed)."""
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(copy.deepcopy(inputs))


def loss_and_grads(trainer, inputs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TRL's real ``_compute_loss`` and the gradients it gives every parameter."""
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads
