"""The ledger's files: a Parquet export, or the ledger inside a checkpoint's component state, both checked.

Parquet is the format verl's datasets already use, readable by pandas, polars, DuckDB and Spark; it is written and read
in row groups, so memory beyond the ledger's own columns stays bounded. Every value is checked before it reaches a
counter (:func:`check_columns`), naming the file, the row, the column and the value.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from .atomic_write import atomic_output
from .errors import ConfigError
from .state_fields import INT64_MAX  # the largest count: a larger one would wrap when cast to a counter

#: The format the header names, and its version (bumped only for changes older readers cannot understand).
LEDGER_FORMAT = "dataflex-ledger"
PARQUET_VERSION = 2
#: Prompts per Parquet row group and per read batch: what one write or read holds beside the ledger (about
#: 13 MiB of columns; the writer keeps one row group's pages until it closes it).
ROW_GROUP = 1 << 17
#: Rows per batch an import reads (about 3.4 MiB of columns, and the arrays made from them).
READ_BATCH = 1 << 15
#: Rows per block of a check that compares two columns (bounded temporaries, hot in cache).
CHECK_BLOCK = 1 << 16
#: The component state file of a checkpoint folder (the name :mod:`dataflex_core.step.state` writes).
CHECKPOINT_STATE_FILE = "dataflex_state.pt"
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
#: The least value of each counter (``None``: any finite value); ``last_success_rate`` is also at most 1.
LOWEST = {name: (-1 if name == "last_sampled_step" else 0) for name in COLUMNS} | {"reward_sum": None}


def ids_digest(sorted_ids: np.ndarray) -> str:
    """A digest of the sorted id set, over its bytes (int64 ids) or its UTF-8 text joined by NULs, in blocks."""
    digest = hashlib.sha256()
    for start in range(0, len(sorted_ids), CHECK_BLOCK):
        block = sorted_ids[start : start + CHECK_BLOCK]
        if sorted_ids.dtype.kind == "i":
            digest.update(np.ascontiguousarray(block, dtype="<i8").data)
        else:
            digest.update((("\x00" if start else "") + "\x00".join(block.tolist())).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def check_columns(source: str, columns: Mapping[str, np.ndarray], first_row: int, ids: np.ndarray) -> None:
    """Refuse a counter that no run records (:func:`column_problem`), naming the file, the row, the id and the
    value. ``columns`` are numpy arrays (integer or float) of rows ``first_row ...``."""
    problem = column_problem(columns)
    if problem is not None:
        name, i, value, reason = problem
        prompt = ids[i].item() if isinstance(ids[i], np.generic) else ids[i]
        raise ConfigError(
            f"the ledger {source} row {first_row + i} (id {prompt!r}) has {name}={value!r}: {reason}; give a ledger "
            "a DataFlex run exported (or fix that value), or unset dataflex.ledger.load"
        )


def column_problem(columns: Mapping[str, np.ndarray]) -> tuple[str, int, Any, str] | None:
    """The first counter value no run records, as ``(column, row, value, why)``, or ``None``: each is finite, at
    least :data:`LOWEST`, whole for the counts, ``last_success_rate`` in [0, 1], ``successes`` at most
    ``rollouts``. The one rule for a Parquet file and a checkpoint's ledger alike."""

    def fail(name: str, bad: np.ndarray, values: np.ndarray, reason: str) -> tuple[str, int, Any, str]:
        i = int(np.flatnonzero(bad)[0])
        value = values[i].item()
        shown = int(value) if float(value).is_integer() and COLUMNS[name][0] == torch.long else value
        return name, i, shown, reason

    for name, values in columns.items():
        whole = values.dtype.kind in "iu"  # an integer column is finite and whole by its dtype
        if not len(values):
            continue
        # a valid column costs its least value (a NaN shows there) and, where a rule reads it, its largest: not
        # for an int64 count, at most INT64_MAX by its dtype; the mask that locates a bad row only once they show one
        # (numpy's vectorised reductions, in this thread: torch's aminmax was 4-10x slower, more on a busy machine)
        least = values.min().item()
        most = values.max().item() if values.dtype.kind != "i" or name == "last_success_rate" else None
        if not whole and not (math.isfinite(least) and math.isfinite(most)):
            return fail(name, ~np.isfinite(values), values, "every counter is a finite number")
        if COLUMNS[name][0] == torch.long and most is not None and most >= 2**63:  # before any cast: it would wrap
            return fail(name, values >= (2**63 if whole else 2.0**63), values, f"a count is at most {INT64_MAX}")
        low = LOWEST[name]
        if low is not None and least < low:
            return fail(name, values < low, values, f"it is at least {low}")
        if not whole and COLUMNS[name][0] == torch.long and (np.floor(values) != values).any():
            return fail(name, np.floor(values) != values, values, "it counts, so it is a whole number")
        if name == "last_success_rate" and most > 1:
            return fail(name, values > 1, values, "a success rate is at most 1")
    if "successes" in columns and "rollouts" in columns:
        successes, rollouts = columns["successes"], columns["rollouts"]
        for start in range(0, len(rollouts), CHECK_BLOCK):  # in blocks: no temporary of n values
            block = slice(start, start + CHECK_BLOCK)
            over = successes[block] > rollouts[block] + 1e-9
            if over.any():
                bad = np.zeros(len(rollouts), dtype=bool)
                bad[block] = over
                return fail("successes", bad, successes, "a prompt has at most one success per rollout")
    return None


def write_parquet(path: str, ids: np.ndarray, columns: Mapping[str, torch.Tensor], header: Mapping[str, Any]) -> None:
    """The ledger as Parquet at ``path`` (atomically: a temp file renamed), one row group per :data:`ROW_GROUP`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    id_type = pa.int64() if ids.dtype.kind == "i" else pa.string()
    schema = pa.schema(
        [pa.field("id", id_type)]
        + [pa.field(name, pa.from_numpy_dtype(columns[name].numpy().dtype)) for name in COLUMNS],
        metadata={"dataflex": json.dumps(dict(header))},
    )
    # the one writer (regular files only: a device, a FIFO, a directory or a missing folder is one line naming it);
    # no dictionary pages: the writer would hold each column's dictionary and its indices (5x the peak, and
    # slower, for counters that compress well enough without)
    with atomic_output(path) as temp, pq.ParquetWriter(str(temp), schema, use_dictionary=False) as writer:
        for start in range(0, len(ids), ROW_GROUP):
            end = min(start + ROW_GROUP, len(ids))
            arrays = [pa.array(ids[start:end], type=id_type)]
            arrays += [pa.array(columns[name][start:end].numpy()) for name in COLUMNS]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= INT64_MAX


#: The header's fields a load reads: what each may hold, and how a message says it.
HEADER_FIELDS = {
    "prompt_key": (
        lambda v: isinstance(v, str) and bool(v),
        "the dataset column the ids come from, a non-empty string",
    ),
    "prompts": (lambda v: _whole(v, 1), "the number of prompts, a whole number of at least 1"),
    "ids_digest": (lambda v: isinstance(v, str), "the digest of the ids, a string"),
    "last_step": (lambda v: _whole(v, 0), f"the last step recorded, a whole number between 0 and {INT64_MAX}"),
    "success_threshold": (
        lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
        "a number or null",
    ),
}


def _parquet_header(path: str) -> tuple[Any, dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(
            f"the ledger {path} is not a readable Parquet file ({exc}): it is truncated or corrupt; export it again"
        ) from None
    raw = (handle.schema_arrow.metadata or {}).get(b"dataflex")
    try:
        header = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        header = {}
    if not isinstance(header, dict) or header.get("format") != LEDGER_FORMAT:
        raise ConfigError(f"{path} is a Parquet file without a DataFlex ledger header; it is not an exported ledger")
    if header.get("version") != PARQUET_VERSION:
        raise ConfigError(
            f"{path} has ledger version {header.get('version')!r}, but this dataflex-core reads Parquet version "
            f"{PARQUET_VERSION}; upgrade dataflex-core to the version that wrote it"
        )
    names = set(handle.schema_arrow.names)
    unknown = sorted(names - {"id", *COLUMNS})
    if "id" not in names or unknown or len(names) != len(handle.schema_arrow.names):
        raise ConfigError(
            f"{path}: expected the columns id and {list(COLUMNS)}, each once, got {handle.schema_arrow.names}"
        )
    for column in handle.schema_arrow:
        # a counter is a number (an offline pass may write whole counts as floats: checked row by row on read)
        kinds = (pa.types.is_integer, pa.types.is_string if column.name == "id" else pa.types.is_floating)
        if not any(kind(column.type) for kind in kinds):
            raise ConfigError(
                f"the ledger {path} column {column.name!r} holds {column.type} values; "
                + ("ids are integers or strings" if column.name == "id" else "a counter holds numbers")
                + ": give a ledger a DataFlex run exported, or unset dataflex.ledger.load"
            )
    for key, (rule, meaning) in HEADER_FIELDS.items():
        if not rule(header.get(key)):
            raise ConfigError(
                f"the ledger {path} header has {key}={header.get(key)!r}: {meaning}; export the ledger "
                "again, or unset dataflex.ledger.load"
            )
    return handle, header


def read_parquet(path: str) -> tuple[dict[str, Any], Iterator[tuple[int, np.ndarray, dict[str, np.ndarray]]]]:
    """``(header, chunks)``: each chunk ``(first_row, ids, {column: values})``, :data:`READ_BATCH` rows at a time."""
    import pyarrow as pa

    handle, header = _parquet_header(path)
    rows = handle.metadata.num_rows
    if rows != header.get("prompts"):
        raise ConfigError(
            f"the ledger {path} has {rows} rows but its header lists {header.get('prompts')} prompts: it is "
            "truncated or was edited; export it again"
        )

    def chunks() -> Iterator[tuple[int, np.ndarray, dict[str, np.ndarray]]]:
        # record batches of READ_BATCH rows, whatever the file's row groups: what one read holds stays bounded
        # (one thread: decoding columns in parallel holds several at once)
        first = 0
        batches = handle.iter_batches(batch_size=READ_BATCH, use_threads=False)
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as exc:
                raise ConfigError(
                    f"the ledger {path} cannot be read after row {first} ({exc}); export it again"
                ) from None
            if batch is None:
                return
            ids = batch.column("id").to_numpy(zero_copy_only=False)
            values = {
                name: batch.column(name).to_numpy(zero_copy_only=False)
                for name in COLUMNS
                if name in batch.schema.names
            }
            yield first, ids, values
            first += len(ids)

    return header, chunks()


def checkpoint_ledger_state(folder: str) -> dict[str, Any]:
    """The ledger's state in a checkpoint folder's component state file (read as data only)."""
    path = os.path.join(folder, CHECKPOINT_STATE_FILE)
    if not os.path.exists(path):
        raise ConfigError(
            f"dataflex.ledger.load={folder!r} is a folder without {CHECKPOINT_STATE_FILE}; give a checkpoint folder "
            "DataFlex wrote, or a ledger exported to Parquet"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling raises many types; each means the same here
        raise ConfigError(f"{path} cannot be read ({type(exc).__name__}): it is truncated or not DataFlex's") from None
    entries = payload.get("components", {}) if isinstance(payload, dict) else {}
    # a ledger's state by its keys (its role is ``ledger``, or ``history`` under ``mechanism: curriculum``)
    states = [e["state"] for e in entries.values() if isinstance(e, dict) and isinstance(e.get("state"), dict)]
    ledgers = [s for s in states if "prompt_key" in s and ("ids" in s or "ids_utf8" in s) and "times_sampled" in s]
    if not ledgers:
        raise ConfigError(f"{path} holds no prompt ledger (the run's mechanism kept none); give another checkpoint")
    return ledgers[0]
