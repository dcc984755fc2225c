"""Helpers of the fit-loop tests: runs of verl's own fit loop in this process, and what they left behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        """The actor's parameters verl checkpointed after ``step`` (full tensors, float32)."""
        state = torch.load(
            self.checkpoints / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False
        )
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).float() for k, v in state.items()}


class FitSession:
    """Runs verl's fit loop in this process on the shared Ray; caches runs by name."""

    def __init__(self, root: Path) -> None:
        from dataflex_lab.verl.cpu_loop import runner

        self.root = root
        self.runner = runner
        self.workspace = runner.prepare_workspace(root / "workspace")
        self._runs: dict[str, FitRun] = {}

    def run(
        self, name: str, spec: Any, *, expect_error: bool = False, extra_env: dict[str, str] | None = None
    ) -> FitRun:
        if name in self._runs:
            return self._runs[name]
        from fit_components import PROBE_ENV

        folder = self.root / name
        spec.experiment = name
        spec.checkpoint_dir = spec.checkpoint_dir or folder / "checkpoints"
        env = {PROBE_ENV: str(folder / "components"), **(extra_env or {})}
        error = None
        try:
            steps = self.runner.run_in_process(
                spec, self.workspace, folder / "metrics.jsonl", loss_probe_dir=folder / "loss", extra_env=env
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
