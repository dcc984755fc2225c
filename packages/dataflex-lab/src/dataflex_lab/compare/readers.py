"""Readers for the logs a comparison starts from, each turning one file format into :class:`Run` objects.

Formats (the file's content decides, not its name):

* ``dataflex-demo/1`` JSON, written by the training demos' ``--json``: names
  its own arms and seeds (and, under ``"metric"``, the metric its runs are
  compared on: the default), one file holds every run.
* verl's file logger (``trainer.logger=[...,file]``): JSON lines
  ``{"step": N, "data": {metric: value}}``.
* transformers' ``trainer_state.json`` (TRL's trainers write it in every
  checkpoint): its ``log_history`` list of ``{..., "step": N}`` entries.
* TensorBoard event files (verl's and transformers' ``tensorboard`` logger),
  read with the ``tensorboard`` package when it is installed
  (``pip install 'dataflex-lab[tensorboard]'``); TensorFlow is not needed.

The last three do not record an arm or a seed: the caller names them
(``ARM@SEED=PATH`` on the command line, or a ``--name-from`` pattern).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .runs import CompareError, Run, StepLog

#: Each host demo's baseline arm (plain verl, plain TRL), for documents that do not declare theirs.
HOST_BASELINES = {"verl": "sync", "trl": "baseline"}
#: The demo format this reader understands; a higher number is a newer, incompatible layout.
DEMO_FORMAT = "dataflex-demo/1"
#: The demo document's key naming the metric its runs are compared on (``dataflex compare``'s default for it).
DECLARED_METRIC = "metric"
TRAINER_STATE = "trainer_state.json"
TFEVENTS = "events.out.tfevents."
#: ``ARM@SEED=PATH``: how the command line names a run whose file does not.
LABELLED_PATH = re.compile(r"^(?P<arm>[^=@]+)@(?P<seed>-?\d+)=(?P<path>.+)$")
TOO_DEEP = "JSON nested too deeply to read (no log this command reads nests like that); is it the right file?"
INSTALL_TENSORBOARD = "pip install 'dataflex-lab[tensorboard]'"
SUPPORTED = (
    "a demo's --json file (format dataflex-demo/1), verl's file-logger .jsonl, transformers/TRL's "
    "trainer_state.json (or an output directory holding it or checkpoint-*/trainer_state.json), "
    "or TensorBoard event files (events.out.tfevents.* or their directory)"
)


@dataclass(frozen=True)
class RunSpec:
    """One command-line argument: a path, and the arm and seed it was given (``ARM@SEED=PATH``), if any."""

    path: Path
    arm: str | None = None
    seed: int | None = None

    @classmethod
    def parse(cls, text: str) -> RunSpec:
        if Path(text).exists():  # a path that happens to contain '@' and '='
            return cls(Path(text))
        match = LABELLED_PATH.match(text)
        if match is None:
            raise CompareError(
                f"no such file or directory: {text!r} (to name a run's arm and seed, write ARM@SEED=PATH, "
                "e.g. dataflex_sync@1=logs/run1.jsonl)"
            )
        path = Path(match["path"])
        if not path.exists():
            raise CompareError(f"no such file or directory: {str(path)!r} (in {text!r})")
        return cls(path, match["arm"], int(match["seed"]))


def read_runs(specs: Sequence[str | RunSpec], *, name_from: str | None = None) -> list[Run]:
    """Every run named on a command line: paths, or ``ARM@SEED=PATH`` for files that do not name their run.

    ``name_from`` is a regular expression with the named groups ``arm`` and
    ``seed``, searched in each unnamed single-run path, e.g.
    ``runs/(?P<arm>[^/]+)/seed(?P<seed>\\d+)`` for ``runs/<arm>/seed<N>/...``.
    """
    pattern = _name_pattern(name_from)
    runs: list[Run] = []
    for spec in specs:
        spec = spec if isinstance(spec, RunSpec) else RunSpec.parse(spec)
        runs += read_path(spec.path, arm=spec.arm, seed=spec.seed, name_from=pattern)
    if not runs:
        raise CompareError("no runs given: pass the demo's --json file or one log per run (ARM@SEED=PATH)")
    return runs


def read_path(
    path: str | Path, *, arm: str | None = None, seed: int | None = None, name_from: re.Pattern[str] | None = None
) -> list[Run]:
    """The runs in one file or directory (see the module docstring for the formats)."""
    path = Path(path)
    if path.is_dir():
        return [_name(_read_directory(path), path, arm, seed, name_from)]
    if path.name.startswith(TFEVENTS):
        return [_name(_read_tensorboard(path), path, arm, seed, name_from)]
    text = _read_text(path)
    document = _json_document(text, path)
    if isinstance(document, dict) and "format" in document:
        if arm is not None:
            raise CompareError(f"{path} names its own runs ({document.get('format')}); pass it without '{arm}@{seed}='")
        return runs_from_demo(document, str(path))
    if isinstance(document, dict) and "log_history" in document:
        return [_name(_from_trainer_state(document, str(path)), path, arm, seed, name_from)]
    if document is None and text.lstrip().startswith("{"):
        _refuse_cut_document(text, path)
    if (document is None and text.lstrip().startswith("{")) or (isinstance(document, dict) and "data" in document):
        return [_name(_from_verl_jsonl(text, str(path)), path, arm, seed, name_from)]
    raise CompareError(f"{path}: not a log this command reads; expected {SUPPORTED}")


def runs_from_demo(document: dict[str, Any], source: str = "<memory>") -> list[Run]:
    """The runs of a ``dataflex-demo/1`` document: its ``"runs"``, or ``"arms"`` of seed ``"seed"`` in older files."""
    found = document.get("format")
    if found != DEMO_FORMAT:
        newer = isinstance(found, str) and found.startswith("dataflex-demo/")
        raise CompareError(
            f"{source}: format {found!r} is not {DEMO_FORMAT!r}"
            + ("; it was written by a newer DataFlex: upgrade dataflex-lab" if newer else "")
        )
    if "runs" in document:
        records = document["runs"]
        if not isinstance(records, list) or not records:
            raise CompareError(
                f"{source}: 'runs' must be a non-empty list of {{arm, seed, steps}}, got {records!r:.80}"
            )
        runs = [Run.from_record(record, source) for record in records]
    else:
        arms, seed = document.get("arms"), document.get("seed")
        if not isinstance(arms, dict) or not arms or "seed" not in document:
            raise CompareError(f"{source}: a {DEMO_FORMAT} file needs 'runs', or 'arms' (arm -> steps) with 'seed'")
        runs = [Run.from_record({"arm": arm, "seed": seed, "steps": steps}, source) for arm, steps in arms.items()]
    declared = document.get("baseline", HOST_BASELINES.get(document.get("host")))
    metric = document.get(DECLARED_METRIC)
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise CompareError(f"{source}: {DECLARED_METRIC!r} must name a metric the runs log, got {metric!r}")
    return [replace(run, baseline=run.arm == declared, metric=metric) for run in runs]


# -- one format each -------------------------------------------------------------------------------------


def _from_verl_jsonl(text: str, source: str) -> StepLog:
    log = StepLog(source)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except RecursionError:
            raise CompareError(f"{source}:{number}: {TOO_DEEP}") from None
        except json.JSONDecodeError as exc:
            raise CompareError(
                f"{source}:{number}: not JSON ({exc.msg}); verl's file logger writes one object a line"
            ) from None
        if not isinstance(record, dict) or "step" not in record or not isinstance(record.get("data"), dict):
            raise CompareError(
                f'{source}:{number}: expected verl\'s file-logger record {{"step": N, "data": {{...}}}}, '
                f"got {line.strip()[:100]!r}"
            )
        log.add(record["step"], record["data"])
    return log


def _from_trainer_state(document: dict[str, Any], source: str) -> StepLog:
    history = document["log_history"]
    if not isinstance(history, list):
        raise CompareError(f"{source}: 'log_history' must be a list, got {type(history).__name__}")
    log = StepLog(source)
    for number, entry in enumerate(history):
        if not isinstance(entry, dict) or "step" not in entry:
            raise CompareError(f"{source}: log_history[{number}] has no 'step': {entry!r:.100}")
        log.add(entry["step"], {key: value for key, value in entry.items() if key != "step"})
    return log


def _read_directory(path: Path) -> StepLog:
    state = path / TRAINER_STATE
    if not state.is_file():
        checkpoints = sorted(
            (int(p.parent.name.split("-")[-1]), p)
            for p in path.glob(f"checkpoint-*/{TRAINER_STATE}")
            if p.parent.name.split("-")[-1].isdigit()
        )
        state = checkpoints[-1][1] if checkpoints else state
    if state.is_file():
        document = _json_document(_read_text(state), state)
        if not isinstance(document, dict) or "log_history" not in document:
            raise CompareError(f"{state}: not a trainer state (no 'log_history')")
        return _from_trainer_state(document, str(state))
    if any(p.name.startswith(TFEVENTS) for p in path.iterdir()):
        return _read_tensorboard(path)
    raise CompareError(f"{path}: a directory holding none of the logs this command reads; expected {SUPPORTED}")


def _read_tensorboard(path: Path) -> StepLog:
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        raise CompareError(
            f"{path}: reading TensorBoard event files needs the tensorboard package: {INSTALL_TENSORBOARD} "
            "(or compare verl's file-logger .jsonl / TRL's trainer_state.json instead)"
        ) from None
    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    log = StepLog(str(path))
    for tag in accumulator.Tags()[event_accumulator.SCALARS]:
        for event in accumulator.Scalars(tag):
            log.add(event.step, {tag: event.value})
    if not log.steps:
        raise CompareError(f"{path}: the event files hold no scalars (torch's SummaryWriter.add_scalar writes them)")
    return log


# -- helpers ---------------------------------------------------------------------------------------------


def _name(log: StepLog, path: Path, arm: str | None, seed: int | None, pattern: re.Pattern[str] | None) -> Run:
    if arm is None and pattern is not None:
        match = pattern.search(path.as_posix())
        if match is None:
            raise CompareError(f"--name-from {pattern.pattern!r} does not match {path.as_posix()!r}")
        arm, seed = match["arm"], match["seed"]
        try:
            seed = int(seed)
        except ValueError:
            raise CompareError(
                f"--name-from {pattern.pattern!r} gives seed {seed!r} for {path.as_posix()!r}, not an integer; make "
                r"the seed group match digits only, e.g. seed(?P<seed>\d+)"
            ) from None
    if arm is None:
        raise CompareError(
            f"{path} does not record which arm and seed it is; name it as ARM@SEED={path} "
            "(e.g. dataflex_sync@0=...), or pass --name-from with a pattern for your directory layout"
        )
    return log.run(arm, seed, log.where)  # the file actually read (a directory's trainer_state.json)


def _name_pattern(name_from: str | None) -> re.Pattern[str] | None:
    if name_from is None:
        return None
    try:
        pattern = re.compile(name_from)
    except re.error as exc:
        raise CompareError(f"--name-from {name_from!r} is not a regular expression: {exc}") from None
    missing = {"arm", "seed"} - set(pattern.groupindex)
    if missing:
        raise CompareError(
            f"--name-from {name_from!r} lacks the named group(s) {sorted(missing)}; "
            r"e.g. 'runs/(?P<arm>[^/]+)/seed(?P<seed>\d+)'"
        )
    return pattern


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CompareError(f"{path}: not a text file; expected {SUPPORTED}") from None


def _refuse_cut_document(text: str, path: Path) -> None:
    """A text opening with ``{`` that is not one JSON value is JSON lines only if its first line is an object;
    else it is one document cut short (a demo's --json file of a killed or disk-full run), named as such."""
    first = next(line for line in text.splitlines() if line.strip())
    try:
        json.loads(first)
        return
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise CompareError(
                f"{path}: truncated: the JSON document ends early (line {exc.lineno} column {exc.colno}), so the "
                "file was cut short (a killed run or a full disk); rerun the demo, or restore the file"
            ) from None
        raise CompareError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); expected {SUPPORTED}"
        ) from None
    except RecursionError:
        raise CompareError(f"{path}: {TOO_DEEP}") from None


def _json_document(text: str, path: Path) -> Any:
    """The file as one JSON value, or None when it is not one (JSON lines, or not JSON at all)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None
    except RecursionError:
        raise CompareError(f"{path}: {TOO_DEEP}") from None
