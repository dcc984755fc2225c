"""The host step on GPU tensors: ``session.run`` on a batch on ``--device`` against the same on the CPU.

verl runs the step in its CPU controller on the tensors TransferQueue returns; a host whose batch lives on the GPU
(TRL's trainer, a custom loop) runs it there. For several configurations this reports whether the results agree,
stay on the device, and how long a step takes on each. ``python -m dataflex_bench.host_device --device cuda --json
PATH`` (from ``benchmarks/``); ``--device cpu`` runs the same code against itself (a dry run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from dataflex_core import Batch
from dataflex_core.session import DataFlexSession, FieldSupport, HostCapabilities

from .synthetic import SyntheticGRPO, padded

#: (label, dataflex block, loss unit, with importance weights): reweight per sample and per token, groups,
#: select, the sequence unit and composition with the framework's own importance weights.
CONFIGS = [
    ("advantage_magnitude+softmax", {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}},
     "token", False),
    ("group_solve_rate+focal", {"scorer": {"name": "group_solve_rate"}, "actuator": {"name": "focal"}}, "token", False),
    ("token_entropy+high_entropy_tokens",
     {"scorer": {"name": "token_entropy"}, "actuator": {"name": "high_entropy_tokens"}}, "token", False),
    ("token_prob+advantage_reweight (sequence unit, composed)",
     {"scorer": {"name": "token_prob"}, "actuator": {"name": "advantage_reweight"}}, "sequence", True),
    ("group_solve_rate+threshold_band (select)",
     {"mechanism": "select", "scorer": {"name": "group_solve_rate"}, "actuator": {"name": "threshold_band"}},
     "token", False),
]  # fmt: skip
#: The fields :func:`grpo_batch` builds, and the group ids.
FIELDS = ("response_mask", "advantages", "rm_scores", "old_log_probs", "entropy", "uid")
HOST = HostCapabilities(name="the device check", fields={name: FieldSupport(True) for name in FIELDS})


def grpo_batch(prompts: int, n: int, length: int, seed: int = 0) -> tuple[Batch, torch.Tensor]:
    """A GRPO step as a host hands it over (:mod:`.synthetic`: ragged responses, 0/1 rewards, verl's padding rows),
    every 37th response empty, and the framework's importance weights."""
    batch = padded(SyntheticGRPO(prompts, n, length, seed=seed).batch(FIELDS), rows=n, seed=seed)
    batch.batch["response_mask"][::37] = 0
    mask = batch.batch["response_mask"]
    noise = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed))
    return batch, (1 + 0.2 * noise).clamp(min=0.1) * mask


def on(batch: Batch, device: str) -> Batch:
    return Batch({k: v.to(device) for k, v in batch.batch.items()}, dict(batch.non_tensor_batch))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_step(block: dict, unit: str, batch: Batch, importance: torch.Tensor | None, device: str, reps: int):
    """The step's result on ``device`` and the median seconds of ``reps`` steps after one warm-up."""
    # The synthetic batch is grouped by uid, as a GRPO host's is.
    step = DataFlexSession(block)
    step.mount(HOST, loss_unit=unit, adv_estimator="grpo", is_group_estimator=lambda _: True)
    weights = importance.to(device) if importance is not None else None
    result = step.run(on(batch, device), step=1, importance_weights=weights)
    # A fresh copy per timed step, made before the clock starts: a step computes its masks and groups once per
    # batch object, and a host hands it a new batch every step.
    copies = [on(batch, device) for _ in range(reps)]
    times = []
    for copy in copies:
        _sync(device)
        start = time.perf_counter()
        step.run(copy, step=1, importance_weights=weights)
        _sync(device)
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def compare(label: str, block: dict, unit: str, composed: bool, batch, importance, device: str, reps: int) -> dict:
    ref, cpu_s = run_step(block, unit, batch, importance if composed else None, "cpu", reps)
    got, dev_s = run_step(block, unit, batch, importance if composed else None, device, reps)
    problems = []
    for name in ("applied", "factor", "kept"):
        a, b = getattr(ref, name), getattr(got, name)
        if (a is None) != (b is None):
            problems.append(f"{name}: {a is None=} on cpu but {b is None=} on {device}")
            continue
        if a is None:
            continue
        if b.device.type != torch.device(device).type:
            problems.append(f"{name} came back on {b.device}, not {device}")
        if a.dtype == torch.bool:
            if not torch.equal(a, b.cpu()):
                problems.append(f"{name}: {int((a != b.cpu()).sum())} rows differ")
        elif not torch.allclose(a, b.cpu().to(a.dtype), rtol=1e-4, atol=1e-5):
            problems.append(f"{name}: max |cpu - {device}| = {(a - b.cpu()).abs().max().item():.3g}")
    for key, value in ref.metrics.items():
        other = got.metrics.get(key)
        if key.endswith("hook_time_s"):
            continue
        if other is None or abs(other - value) > 1e-4 * max(1.0, abs(value)):
            problems.append(f"metric {key}: {value:.6g} on cpu, {other} on {device}")
    return {
        "config": label, "loss_unit": unit, "composed": composed, "ok": not problems, "problems": problems,
        "cpu_ms": round(cpu_s * 1e3, 2), "device_ms": round(dev_s * 1e3, 2),
    }  # fmt: skip


def run(device: str, prompts: int, n: int, length: int, reps: int) -> dict:
    batch, importance = grpo_batch(prompts, n, length)
    rows = [compare(label, *config, batch, importance, device, reps) for label, *config in CONFIGS]
    return {
        "device": device,
        "device_name": torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "shape": {"prompts": prompts, "rollouts_per_prompt": n, "response_length": length},
        "ok": all(r["ok"] for r in rows),
        "rows": rows,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dataflex_bench.host_device", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the device to compare with the CPU (default: cuda)")
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--n", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--length", type=int, default=1024, help="response length L")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="write the result here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 1
    result = run(args.device, args.prompts, args.n, args.length, args.reps)
    for row in result["rows"]:
        times = f"cpu {row['cpu_ms']} ms, {args.device} {row['device_ms']} ms"
        print(f"{'ok' if row['ok'] else 'FAIL'} {row['config']}: {times} {'; '.join(row['problems'])}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
