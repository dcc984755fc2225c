"""The step's batch across processes: gathered rows in, the main process's result out.

Under accelerate each process holds a slice of the generation batch, in
process order, as TRL lays it out (``_generate_and_score_completions`` slices
its gathered advantages the same way). Group statistics and the mean-one
normalisation must see the whole step's batch, so the per-row fields are
gathered (response length padded to the longest process's), the step runs once
on the main process, and its result is broadcast and sliced back. Running the
components on one process keeps stateful and random components consistent; an
error raised there, or a result that cannot be sent, stops every process naming
the cause instead of leaving the others waiting (:func:`from_main`).

Generation rounds (``filter``) and stages (``pilot``) generate a step's rows
across processes too: each round's rows are laid out in process order and
split evenly (:func:`local_part`), its admission is decided once on the main
process on the gathered rows and every process takes the decision
(:func:`decide_on_main`), so all of them run the same rounds; the trained
batch is assembled from the gathered outputs (:func:`gather_output`) and each
process keeps its slice.

What every process computes on its own (a replica's step, the prompts its train sampler drew) is compared across
the processes each step (:func:`agree`): an error on one process, or processes that disagree, stop the run on every
process naming the cause, before any process trains a batch the others do not.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch
from accelerate.utils import broadcast_object_list, gather, gather_object

from dataflex_core import DataFlexError


def gather_rows(accelerator: Any, value: torch.Tensor) -> torch.Tensor:
    """``(b, ...)`` on each process -> ``(B, ...)`` rows of every process in process order; ``(b, L)`` fields are
    right-padded with 0 to the longest ``L`` first."""
    if accelerator.num_processes == 1:
        return value
    if value.dim() >= 2:
        value = accelerator.pad_across_processes(value, dim=1, pad_index=0, pad_first=False)
    return gather(value.contiguous())


def gather_values(accelerator: Any, values: list[Any]) -> list[Any]:
    """A per-row list on each process -> the rows of every process in process order."""
    if accelerator.num_processes == 1:
        return list(values)
    return list(gather_object(list(values)))


def local_rows(accelerator: Any, rows_per_process: int) -> slice:
    """This process's rows of the gathered batch."""
    start = accelerator.process_index * rows_per_process
    return slice(start, start + rows_per_process)


def local_part(accelerator: Any, rows: list[Any], what: str = "a generation round") -> list[Any]:
    """This process's share of ``rows`` (the whole round's, in process order): an even, contiguous slice.

    :raises DataFlexError: ``rows`` do not split evenly over the processes (TRL gathers equal slices).
    """
    processes = accelerator.num_processes
    if len(rows) % processes:
        raise DataFlexError(
            f"{what} has {len(rows)} rollouts, which do not split evenly over the run's {processes} processes "
            "(TRL gathers an equal share from each); make the rollouts per prompt of every round (num_generations, "
            "and under mechanism pilot pilot.rollouts and num_generations minus it) a multiple of the process count"
        )
    share = len(rows) // processes
    start = accelerator.process_index * share
    return list(rows[start : start + share])


def gather_output(accelerator: Any, output: dict[str, Any], pad_token_id: int, left_padded: tuple[str, ...]) -> dict:
    """TRL's generation output of this process -> the output of every process's rows, in process order.

    Per-row tensors are gathered (``left_padded`` keys padded on the left to the longest process's width, with
    ``pad_token_id`` for ``prompt_ids``, the others on the right with 0); ``num_items_in_batch`` is TRL's
    gathered count already and is kept.
    """
    if accelerator.num_processes == 1:
        return dict(output)
    out: dict[str, Any] = {}
    for key, value in output.items():
        if key == "num_items_in_batch" or not isinstance(value, torch.Tensor):
            out[key] = value
            continue
        if value.dim() >= 2:
            fill = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            value = accelerator.pad_across_processes(value, dim=1, pad_index=fill, pad_first=key in left_padded)
        out[key] = gather(value.contiguous())
    return out


def local_output(accelerator: Any, output: dict[str, Any]) -> dict[str, Any]:
    """The whole step's generation output -> this process's rows of it (``num_items_in_batch`` stays the whole
    batch's count, as TRL's is)."""
    if accelerator.num_processes == 1:
        return output
    rows = len(output["advantages"])
    mine = local_rows(accelerator, rows // accelerator.num_processes)
    return {
        key: value[mine] if isinstance(value, torch.Tensor) and key != "num_items_in_batch" else value
        for key, value in output.items()
    }


def decide_on_main(accelerator: Any, record: Any, decide: Any, what: str = "a decision of the step") -> Any:
    """``decide()`` on the main process, which records its decision in ``record`` (a step's rounds or stages);
    every other process takes the main process's ``record`` (its data attributes), so all run the same rounds.

    The components run once, on the whole step's batch; their error stops every process (:func:`from_main`).
    """
    if accelerator.num_processes == 1:
        return decide()

    def run() -> tuple[Any, dict[str, Any]]:
        value = decide()
        return value, {name: item for name, item in vars(record).items() if not callable(item)}

    value, state = from_main(accelerator, run, what)
    if not accelerator.is_main_process:
        vars(record).update(state)
    return value


def from_main(accelerator: Any, compute: Any, what: str = "a DataFlex computation") -> Any:
    """``compute()`` on the main process, its value on every process.

    What is broadcast is an envelope the main process has already pickled (and read back): the value, or, where
    ``compute`` raised (``KeyboardInterrupt`` included) or its value does not travel, the cause as text. So an
    exception that does not pickle (one holding a lock or a connection) or does not unpickle (one whose
    ``__init__`` takes other arguments) never leaves the other processes waiting on the broadcast or failing in
    it: the main process raises its error, every other process a :class:`DataFlexError` naming ``what``, the main
    process and the cause.
    """
    if accelerator.num_processes == 1:
        return compute()
    envelope: list[Any] = [None]
    value, error = None, None
    if accelerator.is_main_process:
        try:
            value = compute()
        except BaseException as exc:  # noqa: BLE001 - raised here and named on every other process below
            error, envelope[0] = exc, ("error", f"{type(exc).__name__}: {exc}")
        else:
            try:
                data = pickle.dumps(value)
                pickle.loads(data)  # noqa: S301 - what the other processes will read: it must read back
                envelope[0] = ("ok", data)
            except Exception as exc:  # noqa: BLE001 - a value that cannot travel: named on every process
                cause = f"its value cannot be sent to the other processes ({type(exc).__name__}: {exc})"
                error, envelope[0] = DataFlexError(f"{what} on the main process: {cause}"), ("error", cause)
                error.__cause__ = exc
    broadcast_object_list(envelope, from_process=0)
    status, body = envelope[0]
    if error is not None:
        raise error
    if status == "error":
        raise DataFlexError(
            f"{what} failed on the main process (process 0 of {accelerator.num_processes}): {body}; the run stops "
            "on every process, so that no process trains a batch the others do not"
        )
    return value if accelerator.is_main_process else pickle.loads(body)  # noqa: S301 - the run's own processes


def agree(accelerator: Any, outcome: tuple[str, Any], what: str, error: BaseException | None = None) -> None:
    """Every process's ``outcome`` of ``what`` (``("ok", value)``, or ``("error", text)`` where it raised
    ``error``), compared: an error on any process, or a value that differs from process 0's, raises on every process.

    :raises DataFlexError: naming the process that failed and its error, or those that disagree.
    """
    if accelerator.num_processes == 1:
        if error is not None:
            raise error
        return
    outcomes = gather_object([outcome])
    count = len(outcomes)
    failed = [(rank, text) for rank, (status, text) in enumerate(outcomes) if status == "error"]
    if failed:
        rank, text = failed[0]
        raise DataFlexError(
            f"{what} failed on process {rank} of {count}: {text}; the run stops on every process, so that no "
            "process trains a batch the others do not"
        ) from error
    values = [value for _, value in outcomes]
    differ = [rank for rank, value in enumerate(values) if value != values[0]]
    if differ:
        raise DataFlexError(
            f"the processes disagree on {what}: process(es) {differ} of {count} differ from process 0 "
            f"({values[differ[0]]!r} vs {values[0]!r}); the run stops on every process, so that no process trains "
            "a batch the others do not. A component must give the same output on every process given the same "
            "inputs (its randomness seeded by the run's seed, not by the process)"
        )
