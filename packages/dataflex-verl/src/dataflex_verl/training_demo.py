"""``dataflex-verl demo``: train with verl's own GRPO loop on the CPU, the baseline against DataFlex.

Each arm is a real run of ``python -m verl.trainer.main_ppo`` (rollout,
reward, old log-prob, advantage, actor update, weight sync) on the CPU
harness (:mod:`dataflex_verl.cpu_loop`): a tiny random Qwen2 learning the toy
echo task. The arms share the seed, so they start from the same model and
draw the same prompts; ``sync`` is verl's plain trainer, ``dataflex_sync``
runs the configured scorer and actuator in ``_compute_advantage``.

A toy run shows the mechanics (weights reach the loss, their statistics, what
they cost) and a direction; it is not a benchmark result. With ``--seeds K``
the arms are compared over K seeds with :func:`dataflex_core.compare.compare_runs`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .version import __version__

#: The baseline arm and the DataFlex arm, as verl trainer modes.
ARMS = ("sync", "dataflex_sync")
#: Default scorer and actuator (with params) per mechanism.
DEFAULT_PAIRS: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
    "reweight": ("advantage_magnitude", {}, "softmax", {"temperature": 1.0}),
    "select": ("advantage_magnitude", {}, "topk_fraction", {"fraction": 0.5}),
    "mix": ("reward_difficulty", {}, "reward_gap", {}),
}
#: verl's metric for the step's mean reward.
REWARD_METRIC = "critic/score/mean"
#: What the summary says a toy run is, in every output.
TOY_RUN_NOTE = (
    "A toy run on a tiny random model shows the mechanics and a direction, not a benchmark result: "
    "compare methods over seeds on your own task (dataflex compare) before believing a curve."
)
JSON_FORMAT = "dataflex-demo/1"


@dataclass
class DemoSettings:
    """What ``dataflex-verl demo`` runs (the command-line options)."""

    mechanism: str = "reweight"
    scorer: str | None = None
    actuator: str | None = None
    scorer_params: dict[str, Any] | None = None
    actuator_params: dict[str, Any] | None = None
    steps: int = 30
    seed: int = 0
    seeds: int = 1
    loss_agg_mode: str = "token-mean"
    lr: float = 1e-2
    workdir: Path = Path("dataflex_demo")
    json_path: Path | None = None
    plot_path: Path | None = None
    warmup_step: int = 0
    extra_overrides: list[str] = field(default_factory=list)

    def block(self) -> dict[str, Any]:
        """The ``dataflex:`` block of the DataFlex arm."""
        default = DEFAULT_PAIRS[self.mechanism]
        scorer = self.scorer or default[0]
        actuator = self.actuator or default[2]
        scorer_params = (
            self.scorer_params if self.scorer_params is not None else (default[1] if scorer == default[0] else {})
        )
        actuator_params = (
            self.actuator_params if self.actuator_params is not None else (default[3] if actuator == default[2] else {})
        )
        block: dict[str, Any] = {
            "mechanism": self.mechanism,
            "scorer": {"name": scorer, "params": dict(scorer_params)},
            "actuator": {"name": actuator, "params": dict(actuator_params)},
            "warmup_step": self.warmup_step,
        }
        if self.mechanism == "mix":
            from dataflex_core import toy_task

            block.update({"domains": list(toy_task.DOMAINS), "domain_key": "domain"})
        return block

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]


def check_components(block: dict[str, Any]) -> None:
    """Build the block against the installed registry now, so a typo fails before any run starts.

    The trainer's constructor checks it again against the run's verl config (mount-time checks).
    """
    from dataflex_core import build_from_config
    from dataflex_core.config import CORE_KEYS

    build_from_config(block, extra_keys=[key for key in block if key not in CORE_KEYS])


def parse_params(text: str | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``--params '{"scorer": {...}, "actuator": {...}}'`` -> (scorer params, actuator params)."""
    if text is None:
        return None, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--params is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict) or set(value) - {"scorer", "actuator"}:
        raise ValueError(
            f"--params must be a JSON object with the keys scorer and/or actuator, each holding that component's "
            f'params, e.g. \'{{"actuator": {{"temperature": 0.5}}}}\'; got {text!r}'
        )
    for role in ("scorer", "actuator"):
        if role in value and not isinstance(value[role], dict):
            raise ValueError(f"--params {role} must be a JSON object of params, got {value[role]!r}")
    return value.get("scorer"), value.get("actuator")


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def progress_line(arm: str, seed: int, steps: int, record: dict[str, Any]) -> str:
    """One line per step: reward, step time and, for DataFlex, the weights' health."""
    m = record["metrics"]
    line = (
        f"[{arm:<13} seed {seed}] step {record['step']:>3}/{steps}  reward {_fmt(m.get(REWARD_METRIC))}  "
        f"step {_fmt(m.get('timing_s/step'), 2)}s"
    )
    if "dataflex/weight/mean" in m:
        unit = "sequence" if m.get("dataflex/weight/unit_is_sequence") else "token"
        line += (
            f"  weights: mean {_fmt(m['dataflex/weight/mean'])} per {unit}, std {_fmt(m.get('dataflex/weight/std'))}, "
            f"ESS {m.get('dataflex/ess_fraction', 0):.0%}, zero {m.get('dataflex/zero_weight_fraction', 0):.0%}, "
            f"hook {1000 * m.get('dataflex/hook_time_s', 0):.1f} ms"
        )
    elif "dataflex/kept_fraction" in m:
        line += f"  kept {m['dataflex/kept_fraction']:.0%}"
    return line


def _values(steps: list[dict[str, Any]], name: str, skip_first: bool = False) -> list[float]:
    rows = steps[1:] if skip_first else steps
    return [float(r["metrics"][name]) for r in rows if isinstance(r["metrics"].get(name), (int, float))]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize_arm(runs: list[list[dict[str, Any]]], window: int) -> dict[str, Any]:
    """Per-arm figures averaged over seeds: reward at the start and end, step time, weight statistics."""

    def over_seeds(fn: Any) -> float | None:
        values = [v for v in (fn(steps) for steps in runs) if v is not None]
        return _mean(values)

    summary = {
        "reward_first": over_seeds(lambda s: _mean(_values(s[:window], REWARD_METRIC))),
        "reward_last": over_seeds(lambda s: _mean(_values(s[-window:], REWARD_METRIC))),
        # step 1 includes verl's warm-up (first forward passes, lazy initialisation)
        "step_s_median": over_seeds(lambda s: _median(_values(s, "timing_s/step", skip_first=True))),
        "hook_s_median": over_seeds(lambda s: _median(_values(s, "dataflex/hook_time_s", skip_first=True))),
        "weight_mean": over_seeds(lambda s: _mean(_values(s, "dataflex/weight/mean"))),
        "weight_std": over_seeds(lambda s: _mean(_values(s, "dataflex/weight/std"))),
        "ess_fraction": over_seeds(lambda s: _mean(_values(s, "dataflex/ess_fraction"))),
        "zero_weight_fraction": over_seeds(lambda s: _mean(_values(s, "dataflex/zero_weight_fraction"))),
        "kept_fraction": over_seeds(lambda s: _mean(_values(s, "dataflex/kept_fraction"))),
    }
    if summary["hook_s_median"] is not None and summary["step_s_median"]:
        summary["hook_share"] = summary["hook_s_median"] / summary["step_s_median"]
    return summary


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summary_table(summaries: dict[str, dict[str, Any]], window: int) -> str:
    """A Markdown table: one row per arm."""
    header = (
        f"| arm | reward, first {window} steps | reward, last {window} steps | step time (median) | "
        "weight mean (loss unit) | weight std | ESS | zero-weight | hook share of step |"
    )
    lines = [header, "|" + " --- |" * 9]
    for arm, s in summaries.items():

        def pct(key: str, s: dict[str, Any] = s) -> str:
            return "-" if s.get(key) is None else f"{s[key]:.0%}"

        hook = "-" if s.get("hook_share") is None else f"{100 * s['hook_share']:.2f}%"
        lines.append(
            f"| {arm} | {_fmt(s['reward_first'])} | {_fmt(s['reward_last'])} | {_fmt(s['step_s_median'], 2)} s | "
            f"{_fmt(s['weight_mean'])} | {_fmt(s['weight_std'])} | {pct('ess_fraction')} | "
            f"{pct('zero_weight_fraction')} | {hook} |"
        )
    return "\n".join(lines)


def demo_document(settings: DemoSettings, runs: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The ``--json`` document: every metric verl logged, per arm and seed (format ``dataflex-demo/1``)."""
    first = settings.seed
    return {
        "format": JSON_FORMAT,
        "host": "verl",
        "seed": first,
        "seeds": settings.seed_list(),
        "arms": {run["arm"]: run["steps"] for run in runs if run["seed"] == first},
        "runs": runs,
        "settings": {
            "dataflex": settings.block(),
            "steps": settings.steps,
            "loss_agg_mode": settings.loss_agg_mode,
            "lr": settings.lr,
            "dataflex_verl": __version__,
            "wall_s": round(wall_s, 1),
        },
    }


def plot(document: dict[str, Any], path: Path) -> None:
    """Reward per step per arm (mean over seeds, band = min..max) and the DataFlex arm's weight std and ESS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_reward, ax_weights) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    colors = {"sync": "#555555", "dataflex_sync": "#1f77b4"}
    for arm in dict.fromkeys(run["arm"] for run in document["runs"]):
        curves = [run["steps"] for run in document["runs"] if run["arm"] == arm]
        steps = [r["step"] for r in curves[0]]
        per_step = [[_at(curve, step, REWARD_METRIC) for curve in curves] for step in steps]
        mean = [statistics.fmean([v for v in vals if v is not None]) for vals in per_step]
        color = colors.get(arm)
        label = f"{arm} (mean of {len(curves)} seeds)" if len(curves) > 1 else arm
        ax_reward.plot(steps, mean, label=label, color=color, linewidth=1.8)
        if len(curves) > 1:
            low = [min(v for v in vals if v is not None) for vals in per_step]
            high = [max(v for v in vals if v is not None) for vals in per_step]
            ax_reward.fill_between(steps, low, high, color=color, alpha=0.15)
        if arm != "sync":
            for metric, style, name in (
                ("dataflex/weight/std", "-", "weight std"),
                ("dataflex/ess_fraction", "--", "ESS fraction"),
            ):
                values = [statistics.fmean([v for v in (_at(c, s, metric) for c in curves) if v is not None] or [0.0])
                          for s in steps]  # fmt: skip
                ax_weights.plot(steps, values, style, color=color, label=f"{arm}: {name}")
    block = document["settings"]["dataflex"]
    ax_reward.set_title(
        f"verl GRPO on the CPU, toy echo task: {block['mechanism']} "
        f"{block['scorer']['name']} -> {block['actuator']['name']}",
        fontsize=10,
    )
    ax_reward.set_ylabel(f"reward ({REWARD_METRIC})")
    ax_reward.legend(loc="lower right", fontsize=8)
    ax_reward.grid(alpha=0.3)
    ax_weights.set_ylabel("DataFlex weights")
    ax_weights.set_xlabel("training step")
    ax_weights.legend(loc="best", fontsize=8)
    ax_weights.grid(alpha=0.3)
    fig.text(0.01, 0.005, "Toy run: mechanics and a direction, not a benchmark result.", fontsize=7, color="#666666")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _at(steps: list[dict[str, Any]], step: int, metric: str) -> float | None:
    for record in steps:
        if record["step"] == step:
            value = record["metrics"].get(metric)
            return float(value) if isinstance(value, (int, float)) else None
    return None


def run_training_demo(settings: DemoSettings, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Train every arm for every seed; print progress, the summary table (and the comparison); return the document."""
    from .cpu_loop import runner

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    block = settings.block()
    check_components(block)
    started = time.perf_counter()
    workdir = Path(settings.workdir).resolve()
    say(
        f"dataflex-verl {__version__} training demo: verl's GRPO fit loop on the CPU, tiny random Qwen2, toy echo task; "
        f"{settings.steps} steps x {len(ARMS)} arms x {settings.seeds} seed(s), loss_agg_mode={settings.loss_agg_mode}"
    )
    say(f"DataFlex arm: {json.dumps(block)}")
    say(TOY_RUN_NOTE)
    workspace = runner.prepare_workspace(workdir / "workspace", model_seed=settings.seed, data_seed=settings.seed)
    runs: list[dict[str, Any]] = []
    for seed in settings.seed_list():
        for arm in ARMS:
            spec = runner.RunSpec(
                trainer_mode=arm,
                dataflex=block if arm != "sync" else None,
                steps=settings.steps,
                seed=seed,
                loss_agg_mode=settings.loss_agg_mode,
                lr=settings.lr,
                experiment=f"{arm}_seed{seed}",
                extra=list(settings.extra_overrides),
            )
            say(f"\n{arm}, seed {seed}: starting verl (Ray, workers, rollout server: about a minute) ...")
            arm_start = time.perf_counter()
            steps = runner.run_entry_point(
                spec,
                workspace,
                workdir / "metrics" / f"{arm}_seed{seed}.jsonl",
                log_file=workdir / "logs" / f"{arm}_seed{seed}.log",
                on_step=lambda record, arm=arm, seed=seed: say(progress_line(arm, seed, settings.steps, record)),
            )
            say(f"{arm}, seed {seed}: {len(steps)} steps in {time.perf_counter() - arm_start:.0f} s")
            runs.append({"arm": arm, "seed": seed, "steps": steps})
    document = demo_document(settings, runs, time.perf_counter() - started)
    window = max(1, min(5, settings.steps // 3))
    summaries = {arm: summarize_arm([r["steps"] for r in runs if r["arm"] == arm], window) for arm in ARMS}
    document["summary"] = summaries
    say("\n" + summary_table(summaries, window))
    if settings.seeds > 1:
        from dataflex_core.compare import compare_runs

        report = compare_runs(document, baseline="sync")
        say("\n" + report.markdown())
    if settings.json_path is not None:
        settings.json_path.parent.mkdir(parents=True, exist_ok=True)
        settings.json_path.write_text(json.dumps(document, indent=1) + "\n")
        say(f"\nmetrics of every step: {settings.json_path}")
    plot_path = settings.plot_path or workdir / "demo.png"
    try:
        plot(document, plot_path)
        say(f"plot: {plot_path}")
    except ImportError:
        say("plot skipped: matplotlib is not installed (pip install matplotlib)")
    say(f"\n{TOY_RUN_NOTE}\nwall time {time.perf_counter() - started:.0f} s; verl's logs under {workdir / 'logs'}")
    return document


def settings_dict(settings: DemoSettings) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()}
