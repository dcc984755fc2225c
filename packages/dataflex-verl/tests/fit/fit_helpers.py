"""Helpers of the fit-loop tests: runs of verl's own fit loop in this process, and what they left behind."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch


@dataclass
class FitRun:
    """What one training run left: verl's metrics per step, what the actor's loss received, component records."""

    name: str
    folder: Path
    steps: list[dict[str, Any]]
    error: BaseException | None = None
    loss_calls: list[dict[str, Any]] = field(default_factory=list)

    def metric(self, name: str, step: int = 1) -> float:
        for record in self.steps:
            if record["step"] == step:
                return float(record["metrics"][name])
        raise KeyError(f"run {self.name} logged no step {step}; steps: {[r['step'] for r in self.steps]}")

    def records(self, component: str) -> list[dict[str, Any]]:
        import json

        path = self.folder / "components" / f"{component}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    @property
    def checkpoints(self) -> Path:
        return self.folder / "checkpoints"

    def actor_weights(self, step: int) -> dict[str, torch.Tensor]:
        """The actor's parameters verl checkpointed after ``step`` (full tensors, float32), from every rank's shard."""
        folder = self.checkpoints / f"global_step_{step}" / "actor"
        shards = sorted(folder.glob("model_world_size_*_rank_*.pt"), key=lambda path: int(path.stem.rsplit("_", 1)[1]))
        world = {int(path.stem.split("_")[3]) for path in shards}
        assert world == {len(shards)}, f"{folder} holds shards {[p.name for p in shards]}, not one per rank"
        states = [torch.load(path, weights_only=False) for path in shards]
        return {name: _full_tensor([state[name] for state in states]).float() for name in states[0]}

    def loss_calls_by_rank(self, step: int) -> dict[int, list[dict[str, Any]]]:
        """The ``ppo_loss`` calls of ``step``, per rank in call order (each step makes the same calls per rank)."""
        by_rank: dict[int, list[dict[str, Any]]] = {}
        for call in self.loss_calls:  # sorted by file name: per process, in call order
            by_rank.setdefault(call["rank"], []).append(call)
        steps = len(self.steps)
        for rank, calls in by_rank.items():
            assert len(calls) % steps == 0, f"rank {rank} made {len(calls)} loss calls in {steps} steps"
        return {
            rank: calls[(step - 1) * len(calls) // steps : step * len(calls) // steps]
            for rank, calls in by_rank.items()
        }


def _full_tensor(shards: list[Any]) -> torch.Tensor:
    """One parameter from the ranks' pieces of it: FSDP2 keeps a DTensor shard of dim ``placement.dim`` per rank."""
    first = shards[0]
    if not hasattr(first, "to_local"):
        return first
    if len(shards) == 1:
        return first.full_tensor()
    (placement,) = first.placements
    if placement.is_replicate():
        return first.to_local()
    return torch.cat([shard.to_local() for shard in shards], dim=placement.dim)


class FitSession:
    """Runs verl's fit loop in this process on the shared Ray; caches runs by name."""

    def __init__(self, root: Path) -> None:
        from dataflex_lab.verl.cpu_loop import runner

        self.root = root
        self.runner = runner
        self.workspace = runner.prepare_workspace(root / "workspace")
        self._runs: dict[str, FitRun] = {}
        self._workspaces: dict[tuple[str, int], Any] = {}

    def task_workspace(self, task: str, train_rows: int) -> Any:
        """A workspace of another task (e.g. ``mixed``: echo prompts with solved and unsolvable ones), built once."""
        key = (task, train_rows)
        if key not in self._workspaces:
            self._workspaces[key] = self.runner.prepare_workspace(
                self.root / f"workspace_{task}_{train_rows}", task=task, train_rows=train_rows
            )
        return self._workspaces[key]

    def run(
        self,
        name: str,
        spec: Any,
        *,
        expect_error: bool = False,
        extra_env: dict[str, str] | None = None,
        workspace: Any = None,
    ) -> FitRun:
        """Run ``spec`` on the session's echo workspace (or ``workspace``), or return the run cached as ``name``."""
        if name in self._runs:
            return self._runs[name]
        from fit_components import PROBE_ENV

        folder = self.root / name
        spec.experiment = name
        spec.checkpoint_dir = spec.checkpoint_dir or folder / "checkpoints"
        env = {PROBE_ENV: str(folder / "components"), **(extra_env or {})}
        error = None
        try:
            output = folder / "metrics.jsonl"
            steps = self.runner.run_in_process(
                spec, workspace or self.workspace, output, loss_probe_dir=folder / "loss", extra_env=env
            )
        except Exception as exc:  # noqa: BLE001 - a test that expects a refusal inspects it
            if not expect_error:
                raise
            error, steps = exc, self.runner.read_metrics(folder / "metrics.jsonl")
        calls = [torch.load(p) for p in sorted((folder / "loss").glob("*.pt"))] if (folder / "loss").exists() else []
        run = FitRun(name, folder, steps, error, calls)
        self._runs[name] = run
        return run


#: verl's trainer lines a DataFlex run can take: V1 (``dataflex_sync``) and legacy (``RayPPOTrainer``).
LINES = ("v1", "legacy")
#: The same, for a test whose V1 run is the default set's and whose legacy run repeats the assertion on the other
#: line: that one runs in ``nox -s tests-full`` (marker ``full``).
LINES_LEGACY_IN_FULL = ("v1", pytest.param("legacy", marks=pytest.mark.full))


def dataflex_spec(line: str, dataflex: dict[str, Any], **settings: Any) -> Any:
    """A run with DataFlex on verl's V1 line (trainer mode ``dataflex_sync``) or its legacy line (``use_v1=false``)."""
    from dataflex_lab.verl.cpu_loop.runner import RunSpec

    if line == "legacy":
        return RunSpec(use_v1=False, dataflex=dataflex, **settings)
    return RunSpec(trainer_mode="dataflex_sync", dataflex=dataflex, **settings)


def reweight(scorer: str, actuator: str, actuator_params: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A ``dataflex:`` block for ``mechanism: reweight``."""
    return {
        "mechanism": "reweight",
        "scorer": {"name": scorer, "params": {}},
        "actuator": {"name": actuator, "params": dict(actuator_params or {})},
        **extra,
    }


def unit_mean(weights: torch.Tensor, mask: torch.Tensor, unit: str) -> float:
    """Mean of per-token ``weights`` over valid tokens (``token``) or of each valid row's token mean (``sequence``)."""
    mask = mask.bool()
    w = torch.where(mask, weights.double(), torch.zeros((), dtype=torch.float64))
    if unit == "token":
        return float(w.sum() / mask.sum())
    counts = mask.sum(-1)
    rows = counts > 0
    return float((w.sum(-1)[rows] / counts[rows]).mean())


#: Two SGD steps, checkpointed after each: an update is ``lr * gradient``, so float noise stays float noise
#: (an Adam first step moves every weight by about ``lr`` whatever its gradient).
SGD_STEPS = {"steps": 2, "optimizer": "SGD", "lr": 0.5, "save_freq": 1}
#: Per line, the settings of the two-worker runs. V1: one PPO mini-batch of 9 prompts (36 rows; verl's dynamic
#: batch sizes allow one above the train batch), so verl pads each step's 32 rows to 36, 18 a rank. Several
#: mini-batches would pad too, but their composition follows the order rollouts finish in, which differs
#: between runs, and each moves the weights before the next. The legacy line never pads (its batch must
#: divide by the ranks).
TWO_RANK_SETTINGS: dict[str, dict[str, Any]] = {
    "v1": {"mini_batch_prompts": 9, "extra": ["actor_rollout_ref.actor.use_dynamic_bsz=true"]},
    "legacy": {},
}
#: A stateful counting scorer, uniform at step 1 and not at step 2, through a sharp softmax.
UNIFORM_THEN_ADVANTAGE = {
    "mechanism": "reweight",
    "scorer": {"name": "fittest_counting", "params": {"uniform_until": 1}},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}


def plain_run(fits: FitSession, line: str) -> FitRun:
    """verl without DataFlex on one actor worker, two SGD steps: the baseline of the equality checks."""
    from dataflex_lab.verl.cpu_loop.runner import RunSpec

    return fits.run(f"plain_sgd_{line}", RunSpec(use_v1=line != "legacy", **SGD_STEPS))


def two_rank_run(fits: FitSession, line: str) -> FitRun:
    """DataFlex on two actor workers (``UNIFORM_THEN_ADVANTAGE``), otherwise the settings of :func:`plain_run`."""
    settings = {**SGD_STEPS, **copy.deepcopy(TWO_RANK_SETTINGS[line]), "workers": 2}
    return fits.run(f"two_ranks_{line}", dataflex_spec(line, UNIFORM_THEN_ADVANTAGE, **settings))


#: The stateful counting scorer through a sharp softmax (non-uniform weights from the first step).
COUNTING_SOFTMAX = {
    "mechanism": "reweight",
    "scorer": {"name": "fittest_counting", "params": {}},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}
#: One V1 SGD step under ``seq-mean-token-mean`` with :data:`COUNTING_SOFTMAX`, checkpointed after it.
SEQUENCE_MEAN = {"loss_agg_mode": "seq-mean-token-mean", "optimizer": "SGD", "lr": 0.5, "save_freq": 1}


def sequence_mean_spec(**settings: Any) -> Any:
    """A V1 run of :data:`COUNTING_SOFTMAX` under :data:`SEQUENCE_MEAN`; one step unless ``settings`` say otherwise."""
    return dataflex_spec("v1", COUNTING_SOFTMAX, **{"steps": 1, **SEQUENCE_MEAN, **settings})


def sequence_mean_run(fits: FitSession) -> FitRun:
    """The mean-one check of the sequence unit, and the first run the V1 resume tests continue (from step 1)."""
    return fits.run("counting_seq_mean_v1", sequence_mean_spec())
