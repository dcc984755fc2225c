"""The per-prompt ledger: what happened to every prompt of the train dataset, kept across steps, runs and hosts.

Frameworks give every rollout a fresh group id, so the ledger is keyed by a dataset column (``dataflex.prompt_key``). It
travels with the checkpoints and is exported to and loaded from Parquet (:mod:`dataflex_core.ledger_file`), so one run
warm-starts the next. About 120 bytes per prompt; a step's update touches only its prompts. A reward in ``[0, 1]``
counts as that fraction of a success, unless ``success_threshold`` is set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import ConfigError
from .groups import segment_count, segment_max, segment_min, segment_sum
from .ledger_file import (
    COLUMNS,
    LEDGER_FORMAT,
    PARQUET_VERSION,
    check_columns,
    checkpoint_ledger_state,
    ids_digest,
    read_parquet,
    write_parquet,
)
from .state_fields import INT64_MAX

logger = logging.getLogger("dataflex_core.ledger")

#: Two rewards this close count as the same reward (a group without GRPO signal).
SAME_REWARD_TOLERANCE = 1e-6


def _id_array(values: Any) -> np.ndarray:
    """``values`` as an int64 array when every id is an integer, else as a str array."""
    if isinstance(values, torch.Tensor):
        values = values.cpu().numpy()
    if not isinstance(values, np.ndarray):
        try:
            values = np.asarray(values if isinstance(values, (list, tuple)) else list(values))
        except ValueError:
            values = np.asarray(list(values), dtype=object)
    array = values.reshape(-1)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind != "O":
        return array.astype(str)
    integral = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in array.tolist())
    return array.astype(np.int64) if integral else array.astype(str)


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
        self._digest: str | None = None
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
        plain = isinstance(ids, np.ndarray) and ids.dtype.kind == self.values.dtype.kind  # no object pass
        wanted = ids.reshape(-1) if plain else np.asarray(ids, dtype=object).reshape(-1)
        if len(wanted) == 0:
            return torch.zeros(0, dtype=torch.long)
        try:
            values = wanted.astype(self.values.dtype) if plain else _id_array(wanted).astype(self.values.dtype)
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

    def state(self) -> dict[str, torch.Tensor]:
        """The ids as one tensor, never a list (a checkpoint loads lists slowly): ``{"ids": int64 (n,)}``, or
        ``{"ids_utf8": uint8 (n, width)}``, each row an id's UTF-8 bytes padded with zeros."""
        if self.values.dtype.kind == "i":
            return {"ids": torch.from_numpy(self.values.copy())}
        encoded = np.char.encode(self.values, "utf-8")
        width = max(encoded.dtype.itemsize, 1)
        return {"ids_utf8": torch.from_numpy(encoded.view(np.uint8).reshape(len(encoded), width).copy())}

    @staticmethod
    def from_state(state: Mapping[str, Any]) -> np.ndarray:
        """The id array of :meth:`state` (or the list older checkpoints hold)."""
        if "ids_utf8" in state:
            raw = torch.as_tensor(state["ids_utf8"]).numpy()
            width = max(raw.shape[-1], 1)
            return np.char.decode(raw.reshape(len(raw), -1).copy().view(f"S{width}").reshape(-1), "utf-8")
        ids = state["ids"]
        if isinstance(ids, torch.Tensor) and ids.dtype == torch.long and ids.dim() == 1:
            return ids.numpy()  # the saved tensor itself: read, never written
        return _id_array(ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids))

    def digest(self) -> str:
        """A digest of the id set (order-free): a file for another dataset differs. The ids never change."""
        if self._digest is None:
            self._digest = ids_digest(self._sorted)
        return self._digest


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


#: The Beta prior of every prompt's solve rate: uniform on [0, 1].
SOLVE_RATE_PRIOR = (1.0, 1.0)


class PromptLedger:
    """Per-prompt statistics over the train dataset's rows, fed after every step; checkpointed and exported.

    :param ids: the dataset's prompt ids.
    :param success_threshold: a response succeeds when its reward is at least this; ``None`` counts a
        reward in ``[0, 1]`` as that fraction of a success.
    """

    kind = "ledger"  # what the checkpoint records this state as
    name = "prompt_ledger"

    def __init__(self, ids: PromptIds, success_threshold: float | None = None) -> None:
        self.ids = ids
        self.success_threshold = success_threshold
        n = len(ids)
        for column, (dtype, fresh) in COLUMNS.items():
            setattr(self, column, torch.full((n,), fresh, dtype=dtype))
        #: The last step recorded (0 before the first); the next prompts are drawn for ``last_step + 1``.
        self.last_step = 0
        self._seen = 0

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
        """Fold one step's valid responses into the ledger: ``rows[i]`` is the dataset row of response ``i``.

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
        kept = ones if trained is None else trained.to(torch.bool).cpu()
        trained_count = segment_count(inverse, m, kept).to(torch.long)
        self._seen += int((self.times_sampled[prompts] == 0).sum())
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
        """The ledger fields ``names`` (:data:`~dataflex_core.step.fields.PROMPT_FIELDS`) of ``rows``."""
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
        """The share of the dataset's prompts rolled out at least once (a running count: O(1) per step)."""
        return self._seen / max(len(self), 1)

    def _loaded(self, last_step: int) -> None:
        self.last_step = int(last_step)
        self._seen = int(np.count_nonzero(self.times_sampled.numpy()))  # a count is checked >= 0 before it is taken

    def state_dict(self) -> dict[str, Any]:
        """The ids and each counter column, not copied (the checkpoint serialises them at once; a later
        :meth:`load_state_dict` writes into them)."""
        return {
            "prompt_key": self.ids.key,
            **self.ids.state(),
            "success_threshold": self.success_threshold,
            "last_step": self.last_step,
            **{column: getattr(self, column) for column in COLUMNS},
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "the checkpoint") -> None:
        """Copy a saved ledger into this ledger's own columns, as torch's ``Module.load_state_dict`` does (it never
        shares the state given); state recorded for another dataset or prompt key, or with a counter no run records
        (:func:`~dataflex_core.ledger_file.check_columns`), is refused. A counter the state lacks is made fresh."""
        saved_ids = PromptIds.from_state(state)
        if (
            state["prompt_key"] != self.ids.key
            or saved_ids.shape != self.ids.values.shape
            or saved_ids.dtype.kind != self.ids.values.dtype.kind
            or not np.array_equal(saved_ids, self.ids.values)
        ):
            raise ConfigError(
                f"{source}'s prompt history was recorded for {len(saved_ids)} prompts keyed by "
                f"{state['prompt_key']!r}, but this run's train dataset has {len(self.ids)} prompts keyed by "
                f"{self.ids.key!r} with other ids or in another order; resume with the same train files and "
                "dataflex.prompt_key, or start the curriculum afresh from a new checkpoint folder"
            )
        self._check_threshold(state.get("success_threshold"), f"{source}'s prompt history")
        last_step = state.get("last_step")
        if isinstance(last_step, bool) or not isinstance(last_step, int) or not 0 <= last_step <= INT64_MAX:
            raise ConfigError(
                f"{source}'s prompt history has last_step={last_step!r}: the last step recorded is a whole number "
                f"between 0 and {INT64_MAX}; resume from another checkpoint"
            )
        saved: dict[str, np.ndarray] = {}
        for column in COLUMNS:
            value = state.get(column)
            if value is None:
                continue
            value = torch.as_tensor(value)
            if value.shape != (len(self),) or value.dtype in (torch.bool, torch.complex64, torch.complex128):
                raise ConfigError(
                    f"{source}'s prompt history has {column} of shape {tuple(value.shape)} ({value.dtype}), not "
                    f"({len(self)},) numbers: it was cut or altered; resume from another checkpoint"
                )
            saved[column] = value.numpy()
        # checked as saved, before the cast to the counters' dtypes (a float 1e19 would wrap to INT64_MIN), then copied
        # in this thread into pages already resident (fresh columns took a page fault per 512 values)
        check_columns(source, saved, 0, self.ids.values)
        for column, (_, fresh) in COLUMNS.items():
            if column in saved:
                np.copyto(getattr(self, column).numpy(), saved[column], casting="unsafe")
            else:
                getattr(self, column).fill_(fresh)
        self._loaded(last_step)

    def _check_threshold(self, saved: Any, what: str) -> None:
        if saved != self.success_threshold:
            logger.warning(
                "dataflex: %s counted successes with success_threshold=%r, this run with %r; the restored counts "
                "keep the old rule",
                what,
                saved,
                self.success_threshold,
            )

    def header(self) -> dict[str, Any]:
        """The Parquet file's header (schema metadata): what it is and which dataset it was recorded for."""
        return {
            "format": LEDGER_FORMAT,
            "version": PARQUET_VERSION,
            "prompt_key": self.ids.key,
            "prompts": len(self),
            "ids_digest": self.ids.digest(),
            "success_threshold": self.success_threshold,
            "last_step": self.last_step,
        }

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the ledger as Parquet, atomically: the column ``id`` and every counter in the dataset's row order,
        :meth:`header` in the schema's metadata."""
        write_parquet(os.fspath(path), self.ids.values, {c: getattr(self, c) for c in COLUMNS}, self.header())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Take the counts of an exported ledger: a warm start from another run or host.

        ``path`` is a Parquet file (:meth:`export`, matched to this dataset's rows by id) or a checkpoint folder.

        :raises ConfigError: another dataset, an id listed twice, a truncated file or a counter no run records,
            naming the file, the row, the column and the value, and the fix.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            source = f"the checkpoint {path}"
            try:
                self.load_state_dict(checkpoint_ledger_state(path), source)
            except ConfigError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError, IndexError, RuntimeError, OverflowError) as exc:
                raise ConfigError(
                    f"{source}'s prompt history cannot be read ({type(exc).__name__}: {exc}): it was not written by "
                    "DataFlex or was altered; give another checkpoint, or unset dataflex.ledger.load"
                ) from None
            logger.info("dataflex: the prompt ledger starts from checkpoint %s (%d prompts)", path, len(self))
            return
        header, chunks = read_parquet(_parquet_path(path))
        self._check_header(path, header)
        # written into the ledger's own columns one chunk at a time (no second set of columns: the peak beside
        # the ledger is a chunk and one byte per prompt); a refused file leaves the ledger fresh, never half-read
        self._reset()
        try:
            self._fill(path, chunks)
        except BaseException:
            self._reset()
            raise
        self._check_threshold(header.get("success_threshold"), f"the ledger {path}")
        self._loaded(header["last_step"])
        logger.info("dataflex: the prompt ledger starts from %s (%d prompts)", path, len(self))

    def _reset(self) -> None:
        """Every counter back to a never-sampled prompt's, in place."""
        for column, (_, fresh) in COLUMNS.items():
            getattr(self, column).fill_(fresh)
        self.last_step, self._seen = 0, 0

    def _fill(self, path: str, chunks: Any) -> None:
        """Write each checked chunk ``(first_row, ids, {column: values})`` of a file into the columns by id."""
        filled = torch.zeros(len(self), dtype=torch.bool)
        for first, ids, values in chunks:
            rows = self.ids.rows(ids, f"the records of {path}")
            check_columns(path, values, first, ids)
            index = _run(rows)  # a file in the dataset's order: a slice, copied as such
            repeat = filled[index] if isinstance(index, slice) else filled[rows] | _repeated(rows)
            if bool(repeat.any()):
                i = int(torch.nonzero(repeat)[0])
                prompt = ids[i].item() if isinstance(ids[i], np.generic) else ids[i]
                raise ConfigError(
                    f"the ledger {path} row {first + i} lists prompt id {prompt!r} a second time; each prompt has "
                    "one record: export the ledger again, or unset dataflex.ledger.load"
                )
            filled[index] = True
            numpy_index = index if isinstance(index, slice) else rows.numpy()
            for name, array in values.items():
                getattr(self, name).numpy()[numpy_index] = array  # numpy casts; Arrow's arrays are read-only views

    def _check_header(self, path: str, header: Mapping[str, Any]) -> None:
        digest = self.ids.digest()
        fix = "export the ledger from a run over the same train files, or unset dataflex.ledger.load"
        if header["prompt_key"] != self.ids.key:
            raise ConfigError(
                f"the ledger {path} keys its prompts by {header['prompt_key']!r}, but this run keys them by "
                f"dataflex.prompt_key={self.ids.key!r}; set the same prompt_key, or {fix}"
            )
        if header["prompts"] != len(self) or header["ids_digest"] != digest:
            raise ConfigError(
                f"the ledger {path} was recorded for another dataset: {header['prompts']} prompts with ids "
                f"digest {header['ids_digest']}, but this run's train dataset has {len(self)} prompts "
                f"with digest {digest} (column {self.ids.key!r}); {fix}"
            )


def _run(rows: torch.Tensor) -> slice | torch.Tensor:
    """``rows`` as a slice when they are consecutive and increasing (one pass), else themselves."""
    values = rows.numpy()
    if len(values) and values[-1] - values[0] == len(values) - 1 and bool((values[1:] > values[:-1]).all()):
        return slice(int(values[0]), int(values[-1]) + 1)
    return rows


def _repeated(rows: torch.Tensor) -> torch.Tensor:
    """Which entries of ``rows`` repeat an earlier one (bool). An exported file lists its rows in order, so a
    strictly increasing chunk is answered in one pass."""
    values = rows.numpy()
    if len(values) < 2 or bool((values[1:] > values[:-1]).all()):
        return torch.zeros(len(values), dtype=torch.bool)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    later = np.zeros(len(values), dtype=bool)
    later[order[1:]] = ordered[1:] == ordered[:-1]
    return torch.from_numpy(later)


def _parquet_path(path: str) -> str:
    """``path``, once it is seen to be a Parquet file."""
    if not os.path.exists(path):
        raise ConfigError(
            f"dataflex.ledger.load={path!r} does not exist; give an exported ledger or a checkpoint folder"
        )
    with open(path, "rb") as handle:
        if handle.read(4) != b"PAR1":
            raise ConfigError(
                f"the ledger {path} is not a Parquet file; give a ledger session.export_ledger wrote (Parquet) or a "
                "checkpoint folder"
            )
    return path


def read_ledger(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, records)`` of an exported ledger (records: one dict per prompt; for tests and small files: it
    holds every record at once)."""
    header, chunks = read_parquet(_parquet_path(os.fspath(path)))
    records = []
    for _, ids, values in chunks:
        for i, prompt_id in enumerate(ids.tolist()):
            record = {"id": prompt_id}
            for name, array in values.items():
                value = float(array[i])
                record[name] = int(value) if COLUMNS[name][0] == torch.long else value
            records.append(record)
    return header, records
