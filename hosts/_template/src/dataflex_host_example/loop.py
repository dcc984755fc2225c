"""A training loop of its own: the framework this template's host adapts, where a real host has verl or TRL.

Small but complete, so the host around it is a real one: a table policy (one row of logits per prompt)
samples a group of responses for each of a step's prompts, a rule reward scores them (the share of tokens
equal to the prompt's target), GRPO advantages, a per-token policy-gradient loss averaged per token or per
sequence, an optimizer step, and checkpoints a run resumes from. Batches have what frameworks' batches
have: empty responses (length 0) and padding rows appended to fill the batch.

Its seams are the methods a host overrides: :meth:`ToyTrainer.rollout` (the step's batch, which a host may
generate in stages through :meth:`ToyTrainer.generate`), :meth:`ToyTrainer.loss_weights` (per-token weights the loss
multiplies in), :meth:`ToyTrainer.save_checkpoint` and :meth:`ToyTrainer.load_checkpoint`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

#: ``loss_agg`` values: the token-mean over the batch, or the mean over sequences of their token-means.
LOSS_AGGS = ("token-mean", "seq-mean-token-mean")
#: The file that makes a folder a checkpoint of this loop (written last).
TRAINER_STATE = "trainer.pt"


@dataclass(frozen=True)
class ToyConfig:
    """The loop's settings."""

    prompts_per_step: int = 4
    group_size: int = 4
    max_length: int = 6
    vocab_size: int = 8
    #: Rows appended as padding (no response token), as verl pads a batch to divide evenly over workers.
    padding_rows: int = 1
    loss_agg: str = "token-mean"
    lr: float = 0.5
    seed: int = 0
    output_dir: str = "toy_run"
    #: Write ``checkpoint-N`` every this many steps (0: never).
    save_steps: int = 0

    def __post_init__(self) -> None:
        if self.loss_agg not in LOSS_AGGS:
            raise ValueError(f"ToyConfig.loss_agg={self.loss_agg!r}; expected one of {', '.join(LOSS_AGGS)}")


def toy_dataset(count: int = 16, vocab_size: int = 8, seed: int = 0) -> list[dict[str, int]]:
    """``count`` prompts, each with the token its responses are rewarded for."""
    gen = torch.Generator().manual_seed(seed)
    return [{"prompt": i, "target": int(t)} for i, t in enumerate(torch.randint(vocab_size, (count,), generator=gen))]


class ToyTrainer:
    """The loop: ``ToyTrainer(config, dataset).train(steps)``; ``train(steps, resume_from=folder)`` resumes."""

    def __init__(self, config: ToyConfig, dataset: Sequence[dict[str, int]]) -> None:
        self.config = config
        self.dataset = list(dataset)
        self.logits = torch.nn.Parameter(torch.zeros(len(self.dataset), config.vocab_size))
        self.optimizer = torch.optim.SGD([self.logits], lr=config.lr)
        self.step = 0
        #: One dict of metrics per step.
        self.history: list[dict[str, float]] = []

    # -- one step ------------------------------------------------------------------------------------------
    def rollout(self, step: int) -> dict[str, torch.Tensor]:
        """The step's batch: ``prompts_per_step`` groups of ``group_size`` responses, then the padding rows."""
        cfg = self.config
        gen = self.step_generator(step)
        prompts = torch.randint(len(self.dataset), (cfg.prompts_per_step,), generator=gen)
        counts = torch.full((cfg.prompts_per_step,), cfg.group_size)
        return self.generate(prompts, counts, torch.arange(cfg.prompts_per_step), gen)

    def step_generator(self, step: int) -> torch.Generator:
        """The random stream of one step's sampling (seeded by the run's seed and the step)."""
        return torch.Generator().manual_seed(self.config.seed * 1_000_003 + step)

    def generate(
        self, prompts: torch.Tensor, counts: torch.Tensor, groups: torch.Tensor, gen: torch.Generator
    ) -> dict[str, torch.Tensor]:
        """``counts[i]`` responses of dataset row ``prompts[i]`` in group ``groups[i]``, then the padding rows."""
        cfg = self.config
        prompt = prompts.to(torch.long).repeat_interleave(counts)
        probs = torch.softmax(self.logits.detach()[prompt], -1)
        tokens = torch.multinomial(probs, cfg.max_length, replacement=True, generator=gen)
        lengths = torch.randint(0, cfg.max_length + 1, (len(prompt),), generator=gen)  # 0: an empty response
        mask = torch.arange(cfg.max_length) < lengths.unsqueeze(-1)
        target = torch.tensor([self.dataset[int(i)]["target"] for i in prompt], dtype=torch.long)
        reward = ((tokens == target.unsqueeze(-1)) & mask).sum(-1) / lengths.clamp(min=1)
        pad = cfg.padding_rows
        return {
            "prompt": torch.cat([prompt, torch.zeros(pad, dtype=prompt.dtype)]),
            "group": torch.cat([groups.to(torch.long).repeat_interleave(counts), torch.full((pad,), -1)]),
            "tokens": torch.cat([tokens, torch.zeros(pad, cfg.max_length, dtype=tokens.dtype)]),
            "mask": torch.cat([mask, torch.zeros(pad, cfg.max_length, dtype=torch.bool)]),
            "reward": torch.cat([reward.to(torch.float32), torch.zeros(pad)]),
            "is_padding": torch.cat([torch.zeros(len(prompt), dtype=torch.bool), torch.ones(pad, dtype=torch.bool)]),
        }

    def advantages(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(rows,)`` GRPO advantages: each reward minus its group's mean, over the group's std (padding: 0)."""
        out = torch.zeros_like(batch["reward"])
        for group in batch["group"][~batch["is_padding"]].unique():
            rows = batch["group"] == group
            rewards = batch["reward"][rows]
            out[rows] = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-6)
        return out

    def log_probs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(rows, L)`` log-probabilities of the response tokens under the current policy."""
        logp = torch.log_softmax(self.logits[batch["prompt"]], -1)
        return logp.gather(-1, batch["tokens"])

    def loss_weights(self, batch: dict[str, torch.Tensor], step: int) -> torch.Tensor | None:
        """The seam: ``(rows, L)`` weights the loss multiplies into each token's term (``None``: none)."""
        return None

    def loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        """The policy-gradient loss, averaged per ``loss_agg``."""
        per_token = -batch["advantages"].unsqueeze(-1) * self.log_probs(batch)
        if weights is not None:
            per_token = per_token * weights
        mask = batch["mask"].to(per_token.dtype)
        if self.config.loss_agg == "token-mean":
            return (per_token * mask).sum() / mask.sum().clamp(min=1)
        rows = mask.sum(-1) > 0
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_sequence[rows].mean()

    def train_step(self) -> torch.Tensor:
        self.step += 1
        batch = self.rollout(self.step)
        batch["advantages"] = self.advantages(batch)
        loss = self.loss(batch, self.loss_weights(batch, self.step))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        real = ~batch["is_padding"]
        self.log({"loss": loss.item(), "reward": batch["reward"][real].mean().item()})
        if self.config.save_steps and self.step % self.config.save_steps == 0:
            self.save_checkpoint(self.checkpoint_folder(self.step))
        return loss.detach()

    def train(self, steps: int, resume_from: str | os.PathLike[str] | None = None) -> None:
        """Train until step ``steps``, first resuming from ``resume_from`` when given."""
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        while self.step < steps:
            self.train_step()

    def log(self, metrics: dict[str, float]) -> None:
        if not self.history or self.history[-1]["step"] != self.step:
            self.history.append({"step": float(self.step)})
        self.history[-1].update(metrics)

    # -- checkpoints -------------------------------------------------------------------------------------------
    def checkpoint_folder(self, step: int) -> Path:
        return Path(self.config.output_dir) / f"checkpoint-{step}"

    def save_checkpoint(self, folder: str | os.PathLike[str]) -> None:
        """The policy, the optimizer and the step into ``folder`` (:data:`TRAINER_STATE`, written last)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {"logits": self.logits.detach().clone(), "optimizer": self.optimizer.state_dict(), "step": self.step}
        torch.save(state, folder / TRAINER_STATE)

    def load_checkpoint(self, folder: str | os.PathLike[str]) -> None:
        path = Path(folder) / TRAINER_STATE
        if not path.is_file():
            raise FileNotFoundError(f"{folder} is not a checkpoint of this loop: it has no {TRAINER_STATE}")
        state = torch.load(path, weights_only=True)
        with torch.no_grad():
            self.logits.copy_(state["logits"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
