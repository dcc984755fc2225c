"""The per-prompt history a host keeps for ``mechanism: curriculum``, keyed by a stable prompt id.

A curriculum decides which prompts to roll out from what happened to them
before: how often each was sampled, when last, how many of its responses
succeeded. Frameworks give every rollout a fresh group id (verl's ``uid`` is a
new UUID each step), so the history is keyed by an id the dataset carries: the
column ``dataflex.prompt_key`` (verl's ``index``, copied from
``extra_info.index``; any unique column in TRL). :class:`PromptIds` maps those
ids to the train dataset's rows and back; :class:`PromptHistory` holds one
entry per row, is fed from each step's rewards (:meth:`PromptHistory.record`)
and travels with the checkpoints (it refuses state recorded for another
dataset).

A response *succeeds* by its reward: with ``success_threshold`` unset, a
reward in ``[0, 1]`` counts as that fraction of a success (rewards outside are
clipped into it: binary 0/1 rewards count as they are); with a threshold, a
response succeeds when its reward reaches it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..groups import segment_count, segment_max, segment_min, segment_sum

logger = logging.getLogger("dataflex_core.step")

#: Two rewards this close count as the same reward (a group without GRPO signal).
SAME_REWARD_TOLERANCE = 1e-6


def _id_array(values: Any) -> np.ndarray:
    """``values`` as an int64 array when every id is an integer, else as a str array."""
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=object).reshape(-1)
    integral = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in array.tolist())
    if integral:
        return array.astype(np.int64)
    return array.astype(str)


class PromptIds:
    """The train dataset's prompt ids, one per row, unique; maps ids seen in a rollout back to rows.

    :param ids: the id of every dataset row, in row order.
    :param key: the dataset column they come from, for messages.
    """

    def __init__(self, ids: Sequence[Any] | np.ndarray, key: str) -> None:
        self.key = key
        self.values = _id_array(ids)
        if len(self.values) == 0:
            raise ConfigError(f"the train dataset has no rows, so dataflex.prompt_key={key!r} gives no prompt ids")
        self._order = np.argsort(self.values, kind="stable")
        self._sorted = self.values[self._order]
        repeated = self._sorted[1:][self._sorted[1:] == self._sorted[:-1]]
        if len(repeated):
            shown = sorted(set(repeated.tolist()))[:5]
            raise ConfigError(
                f"dataflex.prompt_key={key!r} must identify each prompt of the train dataset, but "
                f"{len(repeated)} rows repeat an id (e.g. {shown}); give every row a unique value in column "
                f"{key!r} (verl copies it from extra_info.index) or set dataflex.prompt_key to a column that is unique"
            )

    def __len__(self) -> int:
        return len(self.values)

    def rows(self, ids: Any, where: str = "the step's rollouts") -> torch.Tensor:
        """The dataset rows (int64 ``(m,)``) of ``ids``; an id the dataset does not have is an error naming it."""
        wanted = np.asarray(ids, dtype=object).reshape(-1)
        if len(wanted) == 0:
            return torch.zeros(0, dtype=torch.long)
        try:
            values = _id_array(wanted).astype(self.values.dtype)
        except (TypeError, ValueError):
            values = None
        if values is not None:
            position = np.searchsorted(self._sorted, values).clip(0, len(self._sorted) - 1)
            found = self._sorted[position] == values
        if values is None or not found.all():
            unknown = wanted if values is None else wanted[~found]
            raise ConfigError(
                f"{where} carry prompt id(s) {unknown[:5].tolist()} (column {self.key!r}) that are not ids of the "
                f"train dataset's rows; the curriculum keys its history by dataflex.prompt_key={self.key!r}, which "
                "must be the column the framework carries from each dataset row into its rollouts"
            )
        return torch.from_numpy(self._order[position].astype(np.int64))

    def state(self) -> list[Any]:
        """The ids as a list: checkpoint state holds plain data only (:mod:`.state`)."""
        return self.values.tolist()


@dataclass(frozen=True)
class StepOutcomes:
    """What one step did to the prompts it rolled out: one entry per prompt (``m`` prompts)."""

    rows: torch.Tensor
    rollouts: torch.Tensor
    successes: torch.Tensor
    reward_mean: torch.Tensor
    uniform_reward: torch.Tensor
    #: Valid responses whose reward lies outside [0, 1] (clipped when counting successes without a threshold).
    outside_unit: int


class PromptHistory:
    """Per-prompt statistics over the train dataset's rows, fed after every step; checkpointed state.

    :param ids: the dataset's prompt ids.
    :param success_threshold: a response succeeds when its reward is at least this; ``None`` counts a
        reward in ``[0, 1]`` as that fraction of a success.
    """

    #: What the checkpoint records this state as (it sits beside the scorer's and the sampler's).
    kind = "history"
    name = "prompt_history"

    def __init__(self, ids: PromptIds, success_threshold: float | None = None) -> None:
        self.ids = ids
        self.success_threshold = success_threshold
        n = len(ids)
        self.times_sampled = torch.zeros(n, dtype=torch.long)
        self.last_sampled_step = torch.full((n,), -1, dtype=torch.long)
        self.rollouts = torch.zeros(n, dtype=torch.long)
        self.successes = torch.zeros(n, dtype=torch.float64)
        self.reward_sum = torch.zeros(n, dtype=torch.float64)
        self.last_success_rate = torch.zeros(n, dtype=torch.float64)
        #: The last step recorded (0 before the first); the next prompts are drawn for ``last_step + 1``.
        self.last_step = 0

    def __len__(self) -> int:
        return len(self.ids)

    def success(self, rewards: torch.Tensor) -> torch.Tensor:
        """Each response's success in ``[0, 1]`` from its reward (float64)."""
        rewards = rewards.to(torch.float64)
        if self.success_threshold is None:
            return rewards.clamp(0.0, 1.0)
        return (rewards >= self.success_threshold).to(torch.float64)

    def record(self, rows: torch.Tensor, rewards: torch.Tensor, step: int) -> StepOutcomes:
        """Fold one step's responses into the history: ``rows[i]`` is the dataset row of response ``i``.

        :param rows: int64 ``(k,)`` dataset rows of the step's valid responses (empty responses left out).
        :param rewards: ``(k,)`` their rewards.
        :param step: the training step they belong to.
        """
        rows = rows.to(torch.long).cpu()
        rewards = rewards.to(torch.float64).cpu()
        if rows.shape != rewards.shape:
            raise ValueError(f"rows {tuple(rows.shape)} and rewards {tuple(rewards.shape)} must have one entry each")
        prompts, inverse = torch.unique(rows, return_inverse=True)
        m = len(prompts)
        ones = torch.ones(len(rows), dtype=torch.bool)
        count = segment_count(inverse, m, ones)
        success = segment_sum(self.success(rewards), inverse, m, ones)
        total = segment_sum(rewards, inverse, m, ones)
        spread = segment_max(rewards, inverse, m, ones) - segment_min(rewards, inverse, m, ones)
        rollouts = count.to(torch.long)
        self.times_sampled[prompts] += 1
        self.last_sampled_step[prompts] = int(step)
        self.rollouts[prompts] += rollouts
        self.successes[prompts] += success
        self.reward_sum[prompts] += total
        self.last_success_rate[prompts] = success / count.clamp(min=1)
        self.last_step = max(self.last_step, int(step))
        return StepOutcomes(
            rows=prompts,
            rollouts=rollouts,
            successes=success,
            reward_mean=total / count.clamp(min=1),
            uniform_reward=spread.abs() <= SAME_REWARD_TOLERANCE,
            outside_unit=int(((rewards < 0) | (rewards > 1)).sum()),
        )

    def fields(self, rows: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor | np.ndarray]:
        """The history fields ``names`` (see :data:`~dataflex_core.step.fields.PROMPT_FIELDS`) of ``rows``."""
        rows = rows.to(torch.long)
        out: dict[str, torch.Tensor | np.ndarray] = {}
        for name in names:
            if name == "prompt_index":
                out[name] = rows.clone()
            elif name == "prompt_id":
                out[name] = np.asarray(self.ids.values[rows.numpy()], dtype=object)
            else:
                out[name] = getattr(self, name)[rows].clone()
        return out

    @property
    def seen_fraction(self) -> float:
        """The share of the dataset's prompts rolled out at least once."""
        return float((self.times_sampled > 0).sum()) / max(len(self), 1)

    # -- checkpoint state ------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "prompt_key": self.ids.key,
            "ids": self.ids.state(),
            "success_threshold": self.success_threshold,
            "last_step": self.last_step,
            "times_sampled": self.times_sampled.clone(),
            "last_sampled_step": self.last_sampled_step.clone(),
            "rollouts": self.rollouts.clone(),
            "successes": self.successes.clone(),
            "reward_sum": self.reward_sum.clone(),
            "last_success_rate": self.last_success_rate.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved history; state recorded for another dataset or prompt key is refused."""
        saved_ids = np.asarray(state["ids"])
        if (
            state["prompt_key"] != self.ids.key
            or saved_ids.shape != self.ids.values.shape
            or not np.array_equal(saved_ids.astype(self.ids.values.dtype), self.ids.values)
        ):
            raise ConfigError(
                f"the checkpoint's prompt history was recorded for {len(saved_ids)} prompts keyed by "
                f"{state['prompt_key']!r}, but this run's train dataset has {len(self.ids)} prompts keyed by "
                f"{self.ids.key!r} with other ids or in another order; resume with the same train files and "
                "dataflex.prompt_key, or start the curriculum afresh from a new checkpoint folder"
            )
        if state.get("success_threshold") != self.success_threshold:
            logger.warning(
                "dataflex: the checkpoint's prompt history counted successes with success_threshold=%r, this run "
                "with %r; the restored counts keep the old rule",
                state.get("success_threshold"),
                self.success_threshold,
            )
        self.last_step = int(state["last_step"])
        for name in ("times_sampled", "last_sampled_step", "rollouts", "successes", "reward_sum", "last_success_rate"):
            setattr(self, name, torch.as_tensor(state[name]).clone())
