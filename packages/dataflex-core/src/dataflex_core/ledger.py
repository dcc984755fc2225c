"""The per-prompt ledger: what happened to every prompt of the train dataset, kept across steps, runs and hosts.

Frameworks give every rollout a fresh group id (verl's ``uid`` is a new UUID
each step), so the ledger is keyed by an id the dataset carries: the column
``dataflex.prompt_key`` (verl's ``index``, copied from ``extra_info.index``;
any unique column in TRL). :class:`PromptIds` maps those ids to the train
dataset's rows and back; :class:`PromptLedger` holds one entry per row:

- how often the prompt was rolled out and when last (``times_sampled``,
  ``last_sampled_step``);
- its rollouts generated, trained on and filtered out, and their response
  tokens (``rollouts``, ``rollouts_trained``, ``rollouts_filtered``,
  ``tokens_generated``);
- its rewards: successes, the sum and the sum of squares (mean and variance:
  :meth:`PromptLedger.reward_moments`), the last step's success rate, the steps
  whose group had one reward for every response (``uniform_reward_steps``: no
  GRPO signal) and how many of its latest visits in a row did
  (``uniform_reward_streak``), and the Beta posterior of its solve rate
  (:meth:`PromptLedger.solve_rate_posterior`).

It is fed from each step's rewards (:meth:`PromptLedger.record`), travels with
the checkpoints (it refuses state recorded for another dataset) and is
exported to / loaded from a JSON Lines file (:meth:`PromptLedger.export`,
:meth:`PromptLedger.load`; ``dataflex.ledger.load: path``), so one run, an
offline profiling pass or another host warm-starts the next. JSON Lines, not
Parquet: one self-describing record per prompt that any language reads and a
person can grep, appended or streamed without a columnar library (the core
depends on torch and pluggy only); the first line is a header naming the
format, the prompt key and a fingerprint of the prompt ids.

A response *succeeds* by its reward: with ``success_threshold`` unset, a
reward in ``[0, 1]`` counts as that fraction of a success (rewards outside are
clipped into it: binary 0/1 rewards count as they are); with a threshold, a
response succeeds when its reward reaches it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .atomic_write import write_bytes_atomic
from .errors import ConfigError
from .groups import segment_count, segment_max, segment_min, segment_sum

logger = logging.getLogger("dataflex_core.ledger")

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
        """The ids as a list: checkpoint state holds plain data only (:mod:`dataflex_core.step.state`)."""
        return self.values.tolist()

    def fingerprint(self) -> str:
        """A digest of the id set (order-free): a ledger file recorded for another dataset has another one."""
        ordered = json.dumps(self._sorted.tolist(), separators=(",", ":"))
        return hashlib.sha256(ordered.encode()).hexdigest()[:16]


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


#: The format the first line of an exported ledger names, and its version (bumped only for changes older
#: readers cannot understand).
LEDGER_FORMAT = "dataflex-ledger"
LEDGER_VERSION = 1
#: The file a host writes beside the component state in each checkpoint folder.
CHECKPOINT_LEDGER = "dataflex_ledger.jsonl"
#: The per-prompt counters, their dtype and the value of a prompt never rolled out.
COLUMNS: dict[str, tuple[torch.dtype, float]] = {
    "times_sampled": (torch.long, 0),
    "last_sampled_step": (torch.long, -1),
    "rollouts": (torch.long, 0),
    "rollouts_trained": (torch.long, 0),
    "rollouts_filtered": (torch.long, 0),
    "tokens_generated": (torch.long, 0),
    "successes": (torch.float64, 0.0),
    "reward_sum": (torch.float64, 0.0),
    "reward_sq_sum": (torch.float64, 0.0),
    "last_success_rate": (torch.float64, 0.0),
    "uniform_reward_steps": (torch.long, 0),
    "uniform_reward_streak": (torch.long, 0),
}
#: The Beta prior of every prompt's solve rate: uniform on [0, 1].
SOLVE_RATE_PRIOR = (1.0, 1.0)


class PromptLedger:
    """Per-prompt statistics over the train dataset's rows, fed after every step; checkpointed and exported.

    :param ids: the dataset's prompt ids.
    :param success_threshold: a response succeeds when its reward is at least this; ``None`` counts a
        reward in ``[0, 1]`` as that fraction of a success.
    """

    #: What the checkpoint records this state as.
    kind = "ledger"
    name = "prompt_ledger"

    def __init__(self, ids: PromptIds, success_threshold: float | None = None) -> None:
        self.ids = ids
        self.success_threshold = success_threshold
        n = len(ids)
        for column, (dtype, fresh) in COLUMNS.items():
            setattr(self, column, torch.full((n,), fresh, dtype=dtype))
        #: The last step recorded (0 before the first); the next prompts are drawn for ``last_step + 1``.
        self.last_step = 0

    times_sampled: torch.Tensor
    last_sampled_step: torch.Tensor
    rollouts: torch.Tensor
    rollouts_trained: torch.Tensor
    rollouts_filtered: torch.Tensor
    tokens_generated: torch.Tensor
    successes: torch.Tensor
    reward_sum: torch.Tensor
    reward_sq_sum: torch.Tensor
    last_success_rate: torch.Tensor
    uniform_reward_steps: torch.Tensor
    uniform_reward_streak: torch.Tensor

    def __len__(self) -> int:
        return len(self.ids)

    def success(self, rewards: torch.Tensor) -> torch.Tensor:
        """Each response's success in ``[0, 1]`` from its reward (float64)."""
        rewards = rewards.to(torch.float64)
        if self.success_threshold is None:
            return rewards.clamp(0.0, 1.0)
        return (rewards >= self.success_threshold).to(torch.float64)

    def record(
        self,
        rows: torch.Tensor,
        rewards: torch.Tensor,
        step: int,
        *,
        tokens: torch.Tensor | None = None,
        trained: torch.Tensor | None = None,
    ) -> StepOutcomes:
        """Fold one step's responses into the ledger: ``rows[i]`` is the dataset row of response ``i``.

        :param rows: int64 ``(k,)`` dataset rows of the step's valid responses (empty responses left out).
        :param rewards: ``(k,)`` their rewards.
        :param step: the training step they belong to.
        :param tokens: ``(k,)`` their response tokens (``None``: not counted).
        :param trained: ``(k,)`` bool, whether the loss trains on each (``None``: every one); the others count
            as filtered.
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
        squares = segment_sum(rewards * rewards, inverse, m, ones)
        spread = segment_max(rewards, inverse, m, ones) - segment_min(rewards, inverse, m, ones)
        uniform = spread.abs() <= SAME_REWARD_TOLERANCE
        rollouts = count.to(torch.long)
        kept = torch.ones(len(rows), dtype=torch.bool) if trained is None else trained.to(torch.bool).cpu()
        trained_count = segment_count(inverse, m, kept).to(torch.long)
        self.times_sampled[prompts] += 1
        self.last_sampled_step[prompts] = int(step)
        self.rollouts[prompts] += rollouts
        self.rollouts_trained[prompts] += trained_count
        self.rollouts_filtered[prompts] += rollouts - trained_count
        if tokens is not None:
            self.tokens_generated[prompts] += segment_sum(tokens.to(torch.float64).cpu(), inverse, m, ones).long()
        self.successes[prompts] += success
        self.reward_sum[prompts] += total
        self.reward_sq_sum[prompts] += squares
        self.last_success_rate[prompts] = success / count.clamp(min=1)
        self.uniform_reward_steps[prompts] += uniform.to(torch.long)
        streak = self.uniform_reward_streak[prompts]
        self.uniform_reward_streak[prompts] = torch.where(uniform, streak + 1, torch.zeros_like(streak))
        self.last_step = max(self.last_step, int(step))
        return StepOutcomes(
            rows=prompts,
            rollouts=rollouts,
            successes=success,
            reward_mean=total / count.clamp(min=1),
            uniform_reward=uniform,
            outside_unit=int(((rewards < 0) | (rewards > 1)).sum()),
        )

    def solve_rate_posterior(self, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(alpha, beta)`` float64 of each prompt's Beta posterior of its solve rate (prior
        :data:`SOLVE_RATE_PRIOR`, successes and failures counted fractionally)."""
        index = slice(None) if rows is None else rows.to(torch.long)
        successes, rollouts = self.successes[index], self.rollouts[index].to(torch.float64)
        return SOLVE_RATE_PRIOR[0] + successes, SOLVE_RATE_PRIOR[1] + (rollouts - successes).clamp(min=0)

    def reward_moments(self, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, variance)`` float64 of each prompt's rewards over every rollout so far (0, 0 if never)."""
        index = slice(None) if rows is None else rows.to(torch.long)
        n = self.rollouts[index].to(torch.float64).clamp(min=1)
        mean = self.reward_sum[index] / n
        return mean, (self.reward_sq_sum[index] / n - mean * mean).clamp(min=0)

    def fields(self, rows: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor | np.ndarray]:
        """The ledger fields ``names`` (see :data:`~dataflex_core.step.fields.PROMPT_FIELDS`) of ``rows``."""
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
            **{column: getattr(self, column).clone() for column in COLUMNS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved ledger; state recorded for another dataset or prompt key is refused.

        A state saved before a counter existed leaves that counter fresh.
        """
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
        self._check_threshold(state.get("success_threshold"), "the checkpoint's prompt history")
        self.last_step = int(state["last_step"])
        for column, (dtype, fresh) in COLUMNS.items():
            value = state.get(column)
            fresh_column = torch.full((len(self),), fresh, dtype=dtype)
            setattr(self, column, fresh_column if value is None else torch.as_tensor(value).to(dtype).clone())

    def _check_threshold(self, saved: Any, what: str) -> None:
        if saved != self.success_threshold:
            logger.warning(
                "dataflex: %s counted successes with success_threshold=%r, this run with %r; the restored counts "
                "keep the old rule",
                what,
                saved,
                self.success_threshold,
            )

    # -- the exported file --------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """The first line of the exported file: what it is and which dataset it was recorded for."""
        return {
            "format": LEDGER_FORMAT,
            "version": LEDGER_VERSION,
            "prompt_key": self.ids.key,
            "prompts": len(self),
            "ids_fingerprint": self.ids.fingerprint(),
            "success_threshold": self.success_threshold,
            "last_step": self.last_step,
        }

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the ledger as JSON Lines (atomically): the :meth:`header`, then one record per prompt
        (``{"id": ..., "times_sampled": ..., ...}`` in the dataset's row order)."""
        columns = {column: getattr(self, column).tolist() for column in COLUMNS}
        lines = [json.dumps(self.header())]
        for row, prompt_id in enumerate(self.ids.values.tolist()):
            lines.append(json.dumps({"id": prompt_id, **{column: columns[column][row] for column in COLUMNS}}))
        write_bytes_atomic(os.fspath(path), ("\n".join(lines) + "\n").encode())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Take the counts of an exported ledger (:meth:`export`): a warm start from another run or host.

        Records are matched to this dataset's rows by id, so the file may list them in another order; a file
        recorded for another dataset (another prompt key, or another set of ids) is refused.

        :raises ConfigError: naming the file, what does not match and the fix.
        """
        path = os.fspath(path)
        header, records = read_ledger(path)
        fix = (
            "export the ledger from a run over the same train files (its checkpoint's "
            f"{CHECKPOINT_LEDGER}), or unset dataflex.ledger.load"
        )
        if header["prompt_key"] != self.ids.key:
            raise ConfigError(
                f"the ledger {path} keys its prompts by {header['prompt_key']!r}, but this run keys them by "
                f"dataflex.prompt_key={self.ids.key!r}; set the same prompt_key, or {fix}"
            )
        if header["prompts"] != len(self) or header["ids_fingerprint"] != self.ids.fingerprint():
            raise ConfigError(
                f"the ledger {path} was recorded for another dataset: {header['prompts']} prompts with ids "
                f"fingerprint {header['ids_fingerprint']}, but this run's train dataset has {len(self)} prompts "
                f"with fingerprint {self.ids.fingerprint()} (column {self.ids.key!r}); {fix}"
            )
        rows = self.ids.rows([record["id"] for record in records], f"the records of {path}")
        if len(torch.unique(rows)) != len(self):
            raise ConfigError(f"the ledger {path} lists a prompt id twice; {fix}")
        self._check_threshold(header.get("success_threshold"), f"the ledger {path}")
        for column, (dtype, fresh) in COLUMNS.items():
            values = torch.tensor([record.get(column, fresh) for record in records], dtype=dtype)
            target = torch.empty(len(self), dtype=dtype)
            target[rows] = values
            setattr(self, column, target)
        self.last_step = int(header.get("last_step", 0))
        logger.info("dataflex: the prompt ledger starts from %s (%d prompts)", path, len(self))


#: The ``dataflex:`` block key of the ledger's settings (``ledger: {load: path}``), with its default.
LEDGER_KEY = {"ledger": None}


def ledger_load_path(block: Any) -> str | None:
    """The ``dataflex.ledger.load`` path of a ``dataflex:`` block (``None``: start the ledger empty), checked."""
    settings = (block or {}).get("ledger")
    if settings is None:
        return None
    if not isinstance(settings, dict) or set(settings) - {"load"}:
        raise ConfigError(
            f"dataflex.ledger must be a mapping with the key load (an exported ledger to start from), got "
            f"{settings!r}; e.g. ledger: {{load: run1/checkpoints/global_step_100/{CHECKPOINT_LEDGER}}}"
        )
    path = settings.get("load")
    if path is not None and (not isinstance(path, str) or not path):
        raise ConfigError(f"dataflex.ledger.load must be the path of an exported ledger file, got {path!r}")
    return path


def read_ledger(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, records)`` of an exported ledger file, checked line by line.

    :raises ConfigError: a missing or unreadable file, another format or version, a malformed line (named).
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
    except OSError as exc:
        raise ConfigError(
            f"dataflex.ledger.load={path!r} cannot be read ({exc.strerror}); give an exported ledger"
        ) from None
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} line {number} is not JSON ({exc.msg}); it is not an exported ledger") from None
        if not isinstance(entry, dict):
            raise ConfigError(f"{path} line {number} is a {type(entry).__name__}, not a JSON object")
        entries.append(entry)
    header = entries[0] if entries else {}
    if header.get("format") != LEDGER_FORMAT:
        raise ConfigError(
            f"{path} is not a DataFlex ledger: its first line must be a header with format {LEDGER_FORMAT!r}"
        )
    if header.get("version") != LEDGER_VERSION:
        raise ConfigError(
            f"{path} has ledger version {header.get('version')!r}, but this dataflex-core reads version "
            f"{LEDGER_VERSION}; upgrade dataflex-core to the version that wrote it"
        )
    missing = [key for key in ("prompt_key", "prompts", "ids_fingerprint") if key not in header]
    if missing:
        raise ConfigError(f"{path}: its header lacks {missing}; it is not an exported ledger")
    records = entries[1:]
    for number, record in enumerate(records, start=2):
        if "id" not in record:
            raise ConfigError(f"{path} line {number} has no prompt id ('id')")
        unknown = sorted(set(record) - {"id", *COLUMNS})
        if unknown:
            raise ConfigError(f"{path} line {number} has unknown counters {unknown}; expected {list(COLUMNS)}")
    return header, records
