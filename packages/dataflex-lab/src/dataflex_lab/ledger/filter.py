"""``dataflex ledger filter``: the dataset's rows whose prompts meet a rule on the ledger, streamed.

The rule (:class:`KeepRule`) is read per prompt from the ledger's counters; every dropped row is counted under
the first rule that drops it, in this order: ``unseen`` (never rolled out, when those are not kept),
``min_samples`` (rolled out fewer times), ``solve_rate`` (outside the band). A never-seen prompt is judged by the
first rule only: it has no solve rate.

Memory stays bounded by the prompt count, not the rows' size: the dataset's id column (read alone) as core's
:class:`~dataflex_core.ledger.PromptIds` (the check that the ledger was recorded for this dataset: its prompt key,
prompt count and ids digest, as a warm start refuses another dataset's ledger), one byte per row for the verdict,
and one batch of ledger records and one batch of dataset rows at a time (about 33 bytes per prompt with integer
ids). Measured (:func:`~dataflex_lab.ledger.scale.measure_filter`, 200-character prompts, one run each on a shared
2-core machine): 1M prompts (a 200 MiB dataset) in 2.1 s at 696 MiB peak resident, 10M (2 GiB) in 19 s at
764 MiB, most of it the interpreter with torch and pyarrow. The output has the dataset's schema (its metadata too) and row order, written atomically.

The ledger of the kept prompts can be written beside it (``--ledger-output``): a run on the filtered dataset
warm-starts from that one (the whole ledger was recorded for more prompts, and a warm start refuses it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dataflex_core.atomic_write import atomic_output
from dataflex_core.ledger import PromptIds, PromptLedger
from dataflex_core.ledger_file import COLUMNS, check_columns, checkpoint_ledger_state, ids_digest, read_parquet

from .reading import LedgerError, is_parquet

#: Dataset rows per read and write batch.
ROWS_PER_BATCH = 1 << 16
#: The rules, in the order they are applied; a row's verdict is its first failed rule's index + 1 (0: kept).
RULES = ("unseen", "min_samples", "solve_rate")
#: The struct column verl's datasets keep the prompt id in (``RLHFDataset`` copies ``extra_info.index``).
VERL_EXTRA = "extra_info"
#: The counters a rule reads.
RULE_COLUMNS = ("times_sampled", "rollouts", "successes")


@dataclass(frozen=True)
class KeepRule:
    """Which prompts to keep.

    :param solve_rate: ``(low, high)``: keep a seen prompt whose solve rate (``successes / rollouts``) lies in
        ``[low, high]`` (``None``: any).
    :param min_samples: keep a seen prompt rolled out at least this many times (``times_sampled``).
    :param keep_unseen: keep the prompts the run never rolled out.
    """

    solve_rate: tuple[float, float] | None = None
    min_samples: int = 0
    keep_unseen: bool = True

    def __post_init__(self) -> None:
        if self.solve_rate is not None:
            low, high = self.solve_rate
            if not 0 <= low <= high <= 1:
                raise LedgerError(f"--solve-rate LOW:HIGH needs 0 <= LOW <= HIGH <= 1, got {low}:{high}")
        if self.min_samples < 0:
            raise LedgerError(f"--min-samples must be 0 or more, got {self.min_samples}")

    def verdicts(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """uint8 per prompt: 0 kept, else ``RULES.index(rule) + 1`` of the first rule that drops it."""
        times = np.asarray(columns["times_sampled"])
        seen = times > 0
        out = np.zeros(len(times), dtype=np.uint8)
        if self.solve_rate is not None:
            rollouts = np.asarray(columns["rollouts"], dtype=np.float64)
            rate = np.asarray(columns["successes"], dtype=np.float64) / np.maximum(rollouts, 1)
            low, high = self.solve_rate
            out[seen & ((rate < low) | (rate > high))] = 3
        out[seen & (times < self.min_samples)] = 2
        if not self.keep_unseen:
            out[~seen] = 1
        return out


@dataclass
class FilterReport:
    """What a filter did: rows read and written, and the rows each rule dropped."""

    rows: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "kept": self.kept, "dropped": dict(self.dropped)}

    def lines(self, output: str) -> str:
        dropped = ", ".join(f"{rule} {n}" for rule, n in self.dropped.items())
        return f"wrote {output}: kept {self.kept} of {self.rows} rows; dropped by rule: {dropped}\n"


def filter_dataset(
    ledger_path: str | os.PathLike[str],
    dataset_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    rule: KeepRule,
    prompt_key: str | None = None,
    rows_per_batch: int = ROWS_PER_BATCH,
    ledger_output: str | os.PathLike[str] | None = None,
) -> FilterReport:
    """Write the rows of ``dataset_path`` whose prompts ``rule`` keeps to ``output_path`` (Parquet).

    :param ledger_output: also write the ledger of the kept prompts there (Parquet, checked like an export):
        the filtered dataset's ledger, which a next run on it warm-starts from (``dataflex.ledger.load``; the
        whole ledger is refused there, being recorded for more prompts).
    :param prompt_key: the dataset's id column; default the ledger's prompt key (a verl dataset's ``index`` is
        read from ``extra_info.index`` when there is no column ``index``, as verl does).
    :raises LedgerError: / ConfigError: the ledger was recorded for another dataset, a counter is bad (file, row,
        column and value named), the dataset lacks the column.
    """
    ledger_path, dataset_path, output_path = map(os.fspath, (ledger_path, dataset_path, output_path))
    for path in (output_path, ledger_output):
        if path is not None and os.path.abspath(path) in (os.path.abspath(dataset_path), os.path.abspath(ledger_path)):
            raise LedgerError(f"{path} is an input of the filter; write its output to another file")
    dataset = _open_dataset(dataset_path)
    key = prompt_key or _ledger_prompt_key(ledger_path)
    ids = PromptIds(_dataset_ids(dataset, dataset_path, key), key)
    verdict = _verdicts(ledger_path, ids, rule)
    report = FilterReport(rows=len(verdict))
    counts = np.bincount(verdict, minlength=len(RULES) + 1)
    report.kept = int(counts[0])
    report.dropped = {name: int(counts[i + 1]) for i, name in enumerate(RULES)}
    if ledger_output is not None and not report.kept:
        raise LedgerError(f"the rules keep no prompt, so there is no ledger to write to {ledger_output}")

    def write_rows(writer: Any) -> None:
        first = 0
        for batch in dataset.iter_batches(batch_size=rows_per_batch, use_threads=False):
            keep = verdict[first : first + batch.num_rows] == 0
            first += batch.num_rows
            if keep.any():
                writer.write_batch(batch.filter(keep))

    _write_atomic(output_path, dataset.schema_arrow, write_rows)
    if ledger_output is not None:
        _write_kept_ledger(ledger_path, ids, verdict == 0, os.fspath(ledger_output))
    return report


def _write_atomic(path: str, schema: Any, fill: Any, **options: Any) -> None:
    """A Parquet file of ``schema`` at ``path``, written by ``fill(writer)`` through core's one writer (a temporary
    file renamed over ``path``; a directory, a device, a FIFO or a missing folder refused naming the path)."""
    import pyarrow.parquet as pq

    with atomic_output(path) as temp, pq.ParquetWriter(temp, schema, **options) as writer:
        fill(writer)


def _write_kept_ledger(ledger_path: str, ids: PromptIds, kept: np.ndarray, output: str) -> None:
    """The ledger's records of the kept rows' prompts at ``output``, its header naming the kept ids."""
    if os.path.isdir(ledger_path):
        state = checkpoint_ledger_state(ledger_path)
        whole = PromptLedger(ids, state.get("success_threshold"))
        whole.load_state_dict(state, f"the checkpoint {ledger_path}")
        rows = torch.from_numpy(np.flatnonzero(kept))
        part = PromptLedger(PromptIds(ids.values[kept], ids.key), whole.success_threshold)
        state = part.state_dict()
        state.update({c: getattr(whole, c)[rows] for c in COLUMNS}, last_step=whole.last_step)
        part.load_state_dict(state, "the kept prompts' ledger")
        part.export(output)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    header, chunks = read_parquet(ledger_path)
    header = {**header, "prompts": int(kept.sum()), "ids_digest": ids_digest(np.sort(ids.values[kept]))}
    schema = pq.read_schema(ledger_path).with_metadata({"dataflex": json.dumps(header)})

    def write_records(writer: Any) -> None:
        for _, chunk_ids, values in chunks:  # checked when the verdicts were read
            keep = kept[ids.rows(chunk_ids, f"the records of {ledger_path}").numpy()]
            arrays = [
                pa.array((chunk_ids if name == "id" else values[name])[keep], type=schema.field(name).type)
                for name in schema.names
            ]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))

    _write_atomic(output, schema, write_records, use_dictionary=False)


def _open_dataset(path: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not os.path.isfile(path):
        raise LedgerError(f"--dataset {path} is not a file; give the train dataset's Parquet file")
    try:
        # no pre-buffering: with it, iterating the batches holds every row group read so far (2.7 GiB peak for a
        # 2 GiB dataset of 10M prompts, 0.3 GiB without)
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError) as exc:
        raise LedgerError(f"--dataset {path} is not a readable Parquet file ({exc})") from None


def _ledger_prompt_key(path: str) -> str:
    if os.path.isdir(path):
        return checkpoint_ledger_state(path)["prompt_key"]
    _need_parquet(path)
    header, _ = read_parquet(path)
    return header["prompt_key"]


def _need_parquet(path: str) -> None:
    if not os.path.exists(path):
        raise LedgerError(f"{path} does not exist; give a ledger exported to Parquet or a checkpoint folder")
    if not is_parquet(path):
        raise LedgerError(f"{path} is not a Parquet file; give a ledger exported to Parquet or a checkpoint folder")


def _dataset_ids(dataset: Any, path: str, key: str) -> np.ndarray:
    """The dataset's ``key`` column, read alone, batch by batch (``extra_info.<key>`` for a verl dataset)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = dataset.schema_arrow.names
    nested = key not in names and VERL_EXTRA in names
    if nested:
        extra = dataset.schema_arrow.field(VERL_EXTRA).type
        nested = pa.types.is_struct(extra) and extra.get_field_index(key) >= 0
    if key not in names and not nested:
        raise LedgerError(
            f"--dataset {path} has no column {key!r} (the ledger's prompt key) nor {VERL_EXTRA}.{key}; its columns "
            f"are {names}: give the train dataset the ledger was recorded for, or --prompt-key"
        )
    column = VERL_EXTRA if nested else key
    parts = []
    for batch in dataset.iter_batches(batch_size=ROWS_PER_BATCH, columns=[column], use_threads=False):
        values = batch.column(0)
        if nested:
            values = pc.struct_field(values, key)
        if values.null_count:
            row = sum(len(p) for p in parts) + int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            raise LedgerError(f"--dataset {path} row {row} has no value in column {key!r}; every row needs its id")
        parts.append(values.to_numpy(zero_copy_only=False))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _verdicts(ledger_path: str, ids: PromptIds, rule: KeepRule) -> np.ndarray:
    """The rule's verdict per dataset row, from the ledger read in checked batches matched to rows by id."""
    verdict = np.zeros(len(ids), dtype=np.uint8)
    if os.path.isdir(ledger_path):  # a checkpoint's state is one object in memory anyway: core's whole check
        state = checkpoint_ledger_state(ledger_path)
        ledger = PromptLedger(ids, state.get("success_threshold"))
        ledger.load_state_dict(state, f"the checkpoint {ledger_path}")
        verdict[:] = rule.verdicts({c: getattr(ledger, c).numpy() for c in RULE_COLUMNS})
        return verdict
    _need_parquet(ledger_path)
    header, chunks = read_parquet(ledger_path)
    _check_same_dataset(ledger_path, header, ids)
    filled = np.zeros(len(ids), dtype=bool)
    for first, chunk_ids, values in chunks:
        check_columns(ledger_path, values, first, chunk_ids)
        rows = ids.rows(chunk_ids, f"the records of {ledger_path}").numpy()
        again = filled[rows] | _repeats(rows)
        if again.any():
            i = int(np.flatnonzero(again)[0])
            raise LedgerError(
                f"the ledger {ledger_path} row {first + i} (column id) lists prompt id {chunk_ids[i]!r} a second "
                "time; each prompt has one row: export the ledger again"
            )
        filled[rows] = True
        verdict[rows] = rule.verdicts(values)
    return verdict


def _check_same_dataset(path: str, header: dict[str, Any], ids: PromptIds) -> None:
    """Core's warm-start check: the ledger's prompt key, prompt count and ids digest are the dataset's."""
    if header["prompt_key"] != ids.key:
        raise LedgerError(
            f"the ledger {path} keys its prompts by {header['prompt_key']!r}, but --prompt-key is {ids.key!r}"
        )
    if header["prompts"] != len(ids) or header.get("ids_digest") != ids.digest():
        raise LedgerError(
            f"the ledger {path} was recorded for another dataset: {header['prompts']} prompts with ids digest "
            f"{header.get('ids_digest')}, but the dataset has {len(ids)} prompts with digest {ids.digest()} "
            f"(column {ids.key!r}); give the train dataset of the run that recorded it"
        )


def _repeats(rows: np.ndarray) -> np.ndarray:
    """Which entries repeat an earlier one within a batch (an export lists rows increasing: one pass)."""
    if len(rows) < 2 or bool((rows[1:] > rows[:-1]).all()):
        return np.zeros(len(rows), dtype=bool)
    order = np.argsort(rows, kind="stable")
    later = np.zeros(len(rows), dtype=bool)
    later[order[1:]] = rows[order][1:] == rows[order][:-1]
    return later
