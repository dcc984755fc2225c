"""What a host's training demo prints and writes: progress lines, the summary table, ``--json``, the plot.

Both hosts' demos train a tiny model on the toy task (:mod:`dataflex_lab.toy_task`)
in two arms, a baseline and DataFlex, and report them the same way; only the
names of a few metrics differ between frameworks (:class:`HostMetrics`). The
``--json`` document has the format ``dataflex-demo/1`` that ``dataflex compare``
reads::

    {"format": "dataflex-demo/1", "host": ..., "seed": first seed, "seeds": [...],
     "arms": {ARM: [{"step": N, "metrics": {...}}, ...]},        # the first seed
     "runs": [{"arm": ARM, "seed": S, "steps": [...]}, ...],     # every arm and seed
     "settings": {...}, "summary": {ARM: {...}}}

A toy run shows the mechanics and a direction, not a benchmark result; every
output says so (:data:`TOY_RUN_NOTE`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataflex_core.mechanisms.pilot.settings import PILOT_COMMIT_BAND

JSON_FORMAT = "dataflex-demo/1"
#: What the summary says a toy run is, in every output.
TOY_RUN_NOTE = (
    "A toy run on a tiny random model shows the mechanics and a direction, not a benchmark result: "
    "compare methods over seeds on your own task (dataflex compare) before believing a curve."
)
#: Fewer steps per arm than this and the table's rewards and median step times are a handful of noisy samples.
SHORT_RUN_STEPS = 10


def short_run_note(steps: int) -> str | None:
    """What a run of ``steps`` steps per arm cannot show, or None when it is long enough to read the table."""
    if steps >= SHORT_RUN_STEPS:
        return None
    return (
        f"{steps} step{'s' if steps != 1 else ''} per arm: too few to compare the arms' rewards or step times (each "
        "figure is a handful of noisy samples; a step-time difference far above the hook's share is machine noise, "
        f"not DataFlex). The hook share is the cost DataFlex adds; run --steps {SHORT_RUN_STEPS * 2} or more, "
        "over several --seeds, to read the rest."
    )


#: Default scorer and actuator (with their params) of the DataFlex arm, per mechanism.
DEFAULT_PAIRS: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
    "reweight": ("advantage_magnitude", {}, "softmax", {"temperature": 1.0}),
    "select": ("advantage_magnitude", {}, "topk_fraction", {"fraction": 0.5}),
    "mix": ("reward_difficulty", {}, "reward_gap", {}),
    "curriculum": ("solve_rate_ema", {"alpha": 1.0}, "learnability", {}),
    # DAPO's dynamic sampling: admit groups whose rewards vary (TRL and verl's legacy trainer refill; verl V1 refuses it)
    "filter": ("group_reward_variance", {}, "threshold_band", {"low": 0.0, "high": 1.0e9}),
    # Knapsack RL's per-prompt rollout counts from the ledger's solve rates (verl V1; TRL refuses it at mount)
    "allocate": ("solve_rate_posterior", {}, "knapsack", {}),
    # Pilot-Commit: admit the prompts whose pilot rewards vary, commit the rest of the group to them (verl's legacy
    # trainer; verl V1 refuses it at mount)
    "pilot": ("group_reward_variance", {}, "threshold_band", {"low": 0.0, "high": 1.0e9}),
}
#: The pilot arm's ``pilot:`` keys: two pilots on twice the prompts a stage lacks, up to three screening stages,
#: then backfill (the mixed task's constant prompts are often all solved or all failed).
PILOT_DEMO = {"prompts": 2, "rollouts": 2, "keep": True, "max_stages": 4, "on_short": "backfill"}
#: ``--preset pilot-commit``: the pilot arm as published (core's ``pilot.preset``: 3x the batch explored a round,
#: pilots 25 % of the group, the survivor buffer, 10 rounds, solved prompts evicted), admitting on the paper's band
#: of the pilot mean; a step still short backfills (the preset raises, which would end a run where early on nothing
#: lies in the band). The scorer, actuator and pilot keys the user names replace these.
PRESETS: dict[str, dict[str, Any]] = {
    "pilot-commit": {
        "mechanism": "pilot", "scorer": "group_solve_rate", "actuator": "threshold_band",
        "actuator_params": dict(PILOT_COMMIT_BAND),
        "pilot_params": {"preset": "pilot-commit", "on_short": "backfill"},
    },
}  # fmt: skip
#: The curriculum demo's task and its number of train prompts (few enough that each recurs within a run).
CURRICULUM_TASK, CURRICULUM_TRAIN_ROWS = "mixed", 48
#: Completions per prompt on a task family, in both demos: with a binary reward, 8 samples make a group
#: informative often enough.
FAMILY_SAMPLES = 8


@dataclass
class DemoOptions:
    """What both hosts' training demos run (their common command-line options); hosts add their loss settings."""

    mechanism: str = "reweight"
    scorer: str | None = None
    actuator: str | None = None
    scorer_params: dict[str, Any] | None = None
    actuator_params: dict[str, Any] | None = None
    steps: int = 30
    seed: int = 0
    seeds: int = 1
    #: ``None``: 1e-2 on the echo task, 3e-3 on a task family (with a binary reward 1e-2 collapses the tiny
    #: model to one fixed answer within 30 steps; 3e-3 took held-out repeat from 0.03 to 0.27 in 40, measured).
    lr: float | None = None
    workdir: Path = Path("dataflex_demo")
    json_path: Path | None = None
    plot_path: Path | None = None
    warmup_step: int = 0
    #: ``echo``, ``mixed`` or a task family (:mod:`.task_families`); ``None``: mixed for mechanisms curriculum,
    #: filter, allocate and pilot, echo otherwise.
    task: str | None = None
    #: Validate every N steps (a family: on its held-out split; and compare the arms on it); 0 never;
    #: ``None``: 3 for curriculum, 5 for a task family.
    val_every: int | None = None
    #: A task family's ``--task-params`` (:class:`~dataflex_lab.task_families.Structure`'s keys).
    task_params: dict[str, Any] | None = None
    #: ``mechanism: filter``'s ``filter:`` keys (core's defaults for those left out); ``None``: up to 8 rounds,
    #: then backfill (the mixed task's constant prompts are often all solved or all failed).
    filter_params: dict[str, Any] | None = None
    #: ``mechanism: pilot``'s ``pilot:`` keys, the same way (core's defaults for those left out); ``None``:
    #: :data:`PILOT_DEMO`. The evidence campaign's pilot-size settings change one key of it.
    pilot_params: dict[str, Any] | None = None
    #: ``--preset``: a published method's settings (:data:`PRESETS`) under the keys left unset.
    preset: str | None = None

    def __post_init__(self) -> None:
        if self.preset is None:
            return
        if self.preset not in PRESETS:
            raise ValueError(f"--preset {self.preset!r} is not one of {', '.join(PRESETS)}")
        settings = PRESETS[self.preset]
        if self.mechanism != settings["mechanism"]:
            raise ValueError(
                f"--preset {self.preset} is mechanism {settings['mechanism']}'s, not {self.mechanism}'s: add "
                f"--mechanism {settings['mechanism']}"
            )
        for role in ("scorer", "actuator"):  # a component the user names keeps its own params
            if getattr(self, role) is None:
                setattr(self, role, settings[role])
                if getattr(self, f"{role}_params") is None:
                    setattr(self, f"{role}_params", dict(settings.get(f"{role}_params", {})))
        self.pilot_params = {**settings["pilot_params"], **(self.pilot_params or {})}

    @property
    def toy_task(self) -> str:
        mixed = ("curriculum", "filter", "allocate", "pilot")
        return self.task or (CURRICULUM_TASK if self.mechanism in mixed else "echo")

    @property
    def task_family(self) -> Any:
        """The task family the demo trains on, or ``None`` for the echo task and its mixed variant."""
        from . import task_families

        return task_families.FAMILIES.get(self.toy_task)

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else 3e-3 if self.task_family is not None else 1e-2

    @property
    def validation_interval(self) -> int:
        if self.val_every is not None:
            return self.val_every
        return 5 if self.task_family is not None else 3 if self.mechanism == "curriculum" else 0

    def block(self) -> dict[str, Any]:
        """The ``dataflex`` block of the DataFlex arm: the mechanism's default pair unless a component is named."""
        if self.mechanism not in DEFAULT_PAIRS:
            raise ValueError(f"--mechanism {self.mechanism!r} is not one of {', '.join(DEFAULT_PAIRS)}")
        default_scorer, default_scorer_params, default_actuator, default_actuator_params = DEFAULT_PAIRS[self.mechanism]
        scorer = self.scorer or default_scorer
        actuator = self.actuator or default_actuator
        scorer_params = self.scorer_params
        if scorer_params is None:
            scorer_params = default_scorer_params if scorer == default_scorer else {}
        actuator_params = self.actuator_params
        if actuator_params is None:
            actuator_params = default_actuator_params if actuator == default_actuator else {}
        block: dict[str, Any] = {
            "mechanism": self.mechanism,
            "scorer": {"name": scorer, "params": dict(scorer_params)},
            "actuator": {"name": actuator, "params": dict(actuator_params)},
            "warmup_step": self.warmup_step,
        }
        if self.mechanism == "mix":
            from . import toy_task

            block.update({"domains": list(toy_task.DOMAINS), "domain_key": "domain"})
        if self.mechanism == "filter":
            block["filter"] = (
                dict(self.filter_params)
                if self.filter_params is not None
                else {"max_rounds": 8, "on_short": "backfill"}
            )
        if self.mechanism == "pilot":
            block["pilot"] = dict(PILOT_DEMO if self.pilot_params is None else self.pilot_params)
        if self.mechanism in ("curriculum", "allocate"):
            block["prompt_key"] = "index"  # each toy row's id (verl copies extra_info.index into it)
        return block

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]

    def plot_name(self) -> str:
        """The default plot's file name: ``demo.png`` for the default demo, else one per mechanism and task, so
        running another variant does not overwrite the last one's plot."""
        if self.mechanism == "reweight" and self.task is None:
            return "demo.png"
        return f"demo-{self.mechanism}-{self.toy_task}.png"


def arm_done_line(arm: str, seed: int, steps: list[dict[str, Any]], seconds: float) -> str:
    """The line after an arm: its training steps (a validation before training, step 0, is not one) and time."""
    trained = sum(1 for record in steps if record["step"] > 0)
    before = " (and a validation before training)" if any(record["step"] == 0 for record in steps) else ""
    return f"{arm}, seed {seed}: {trained} training step{'s' if trained != 1 else ''}{before} in {seconds:.0f} s"


def shown_path(path: Path | str) -> str:
    """A path as the demos print it: relative to the current directory when under it (both hosts alike)."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def add_demo_arguments(parser: Any, *, workdir: str) -> None:
    """The options both demos take (``--mechanism`` ... ``--val-every``), on an ``argparse`` parser."""
    parser.add_argument("--mechanism", default="reweight", choices=list(DEFAULT_PAIRS))
    scorers = ", ".join(f"{pair[0]} for {m}" for m, pair in DEFAULT_PAIRS.items())
    actuators = ", ".join(f"{pair[2]} for {m}" for m, pair in DEFAULT_PAIRS.items())
    parser.add_argument("--scorer", metavar="NAME", help=f"scorer of the DataFlex arm (default: {scorers})")
    parser.add_argument(
        "--actuator", metavar="NAME", help=f"reweighter/selector/mixer/sampler/allocator (default: {actuators})"
    )
    parser.add_argument("--params", metavar="JSON", help='component params: \'{"scorer": {...}, "actuator": {...}}\'')
    parser.add_argument(
        "--preset",
        choices=list(PRESETS),
        help="a published method's settings (pilot-commit: with --mechanism pilot, "
        "the paper's band on 25 %% pilots, the survivor buffer, one generation call a round, eviction of solved "
        "prompts; a short step backfills); --scorer, --actuator and --params replace its parts",
    )
    parser.add_argument("--steps", type=int, default=30, help="training steps per arm (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="first seed: the model, the prompts, the sampling")
    parser.add_argument("--seeds", type=int, default=1, metavar="K", help="seeds per arm; K > 1 ends with a comparison")
    parser.add_argument(
        "--lr", type=float, help="learning rate (default 1e-2 for the tiny model, 3e-3 on a task family)"
    )
    parser.add_argument("--workdir", default=workdir, help=f"runs, logs and metrics (default ./{workdir})")
    parser.add_argument("--json", metavar="PATH", help="every step's metrics per arm and seed (format dataflex-demo/1)")
    parser.add_argument("--plot", metavar="PATH", help="the PNG plot (default WORKDIR/demo.png)")
    from .task_families import FAMILIES

    parser.add_argument(
        "--task",
        choices=["echo", "mixed", *FAMILIES],
        help="toy task: echo, mixed (echo prompts beside solved and unsolvable ones), or a task family with a "
        f"binary rule reward and a held-out split ({', '.join(FAMILIES)}; docs/evidence.md); default mixed for "
        "curriculum, echo otherwise",
    )
    parser.add_argument(
        "--task-params",
        metavar="JSON",
        help='a task family\'s structure, e.g. \'{"solved_fraction": 0.3, "unsolvable_fraction": 0.3, '
        '"difficulty": [1, 3]}\'',
    )
    parser.add_argument(
        "--val-every",
        type=int,
        metavar="N",
        help="validate every N steps (a task family: on its held-out split) and compare the arms on it (0: never; "
        "default 5 for a task family, 3 for curriculum, else 0)",
    )


def demo_options(args: Any) -> dict[str, Any]:
    """The :class:`DemoOptions` fields from parsed :func:`add_demo_arguments` (raises ``ValueError`` on bad --params)."""
    scorer_params, actuator_params = parse_params(args.params)
    return {
        "mechanism": args.mechanism,
        "scorer": args.scorer,
        "actuator": args.actuator,
        "scorer_params": scorer_params,
        "actuator_params": actuator_params,
        "steps": args.steps,
        "seed": args.seed,
        "seeds": args.seeds,
        "lr": args.lr,
        "workdir": Path(args.workdir),
        "json_path": Path(args.json) if args.json else None,
        "plot_path": Path(args.plot) if args.plot else None,
        "task": args.task,
        "val_every": args.val_every,
        "task_params": parse_task_params(args.task, args.task_params),
        "preset": args.preset,
    }


def parse_task_params(task: str | None, text: str | None) -> dict[str, Any] | None:
    """``--task-params`` as a dict, checked against the family (``ValueError`` names the bad value)."""
    if text is None:
        return None
    from . import task_families

    if task not in task_families.FAMILIES:
        raise ValueError(f"--task-params needs --task with a task family ({', '.join(task_families.FAMILIES)})")
    task_families.structure_from(text, task_families.FAMILIES[task])
    return json.loads(text)


def run_command(program: str, extra: str, run: Callable[[], object], command: str = "demo") -> int:
    """Run a demo (or ``command``) for its console command: bad options, a missing framework or a failed run are
    one line on stderr and exit 2 (a missing framework names ``pip install 'dataflex-lab[<extra>]'``)."""
    from dataflex_core import DataFlexError

    try:
        run()
    except ModuleNotFoundError as exc:
        print(f"{program} {command}: {exc.name} is not installed: pip install 'dataflex-lab[{extra}]'", file=sys.stderr)
        return 2
    except (ValueError, DataFlexError, RuntimeError) as exc:
        print(f"{program} {command}: {exc}", file=sys.stderr)
        return 2
    return 0


#: The advantage estimator both demos train with: every arm is GRPO, so a scorer that needs groups has them.
DEMO_ESTIMATOR = "grpo"


def check_components(block: dict[str, Any]) -> None:
    """Build the block against the installed registry now, so a typo fails before any run starts.

    The build is told the demos' estimator (:data:`DEMO_ESTIMATOR`, which groups rows by prompt), so a scorer
    that declares ``needs_groups`` is checked rather than warned about (``GroupsUncheckedWarning`` would tell a
    plugin author their correct scorer is misdeclared). The host's trainer checks it again against the run's
    own config (mount-time checks). Under nox (the
    ``demo`` and ``demo-trl`` sessions rebuild their virtualenv each run) an unknown name also says how to add
    a plugin package to the session.
    """
    from dataflex_core import UnknownComponentError, build_from_config
    from dataflex_core.block import CORE_KEYS

    try:
        build_from_config(
            block,
            adv_estimator=DEMO_ESTIMATOR,
            is_group_estimator=lambda name: name == DEMO_ESTIMATOR,
            extra_keys=[key for key in block if key not in CORE_KEYS],
        )
    except UnknownComponentError as exc:
        session = os.environ.get("NOX_CURRENT_SESSION")
        if not session:
            raise
        raise UnknownComponentError(
            f"{exc}\n  note: `nox -s {session}` installs only this checkout's plugins, afresh each run: add your "
            f"plugin package with `nox -s {session} -- --with PATH` (its folder)"
        ) from exc


@dataclass(frozen=True)
class HostMetrics:
    """The framework's names for the step's mean reward and its step time (seconds)."""

    reward: str
    step_time: str


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


def fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def progress_line(arm: str, seed: int, steps: int, record: dict[str, Any], names: HostMetrics) -> str:
    """One line per step: reward, step time and, for DataFlex, the weights' health (or a validation alone)."""
    m = record["metrics"]
    validation = [
        value
        for name, value in m.items()
        if (name.startswith("val-") and "/reward/mean@" in name) or name == "eval_reward"  # verl's, TRL's
    ]
    if validation and names.reward not in m:  # a validation logged on its own (before training, TRL's eval)
        return f"[{arm:<13} seed {seed}] step {record['step']:>3}/{steps}  validation {fmt(validation[0])}"
    line = (
        f"[{arm:<13} seed {seed}] step {record['step']:>3}/{steps}  reward {fmt(m.get(names.reward))}  "
        f"step {fmt(m.get(names.step_time), 2)}s"
    )
    if "dataflex/weight/mean" in m:
        unit = "sequence" if m.get("dataflex/weight/unit_is_sequence") else "token"
        line += (
            f"  weights: mean {fmt(m['dataflex/weight/mean'])} per {unit}, std {fmt(m.get('dataflex/weight/std'))}, "
            f"ESS {m.get('dataflex/ess_fraction', 0):.0%}, zero {m.get('dataflex/zero_weight_fraction', 0):.0%}, "
            f"hook {1000 * m.get('dataflex/hook_time_s', 0):.1f} ms"
        )
    if "dataflex/kept_fraction" in m:
        line += f"  kept {m['dataflex/kept_fraction']:.0%}"
    if "dataflex/allocate/n_mean" in m:
        low, high = m.get("dataflex/allocate/n_min"), m.get("dataflex/allocate/n_max")
        spread = f"{fmt(low, 0)}" if low == high else f"{fmt(low, 0)}-{fmt(high, 0)}"
        line += (
            f"  allocation: rollouts per prompt {spread} (mean {fmt(m['dataflex/allocate/n_mean'], 1)}), "
            f"prompts seen before {m.get('dataflex/allocate/seen_before', 0):.0%}"
        )
        if m.get("dataflex/allocate/fallback"):
            line += " (even split: allocator not asked)"
    if any(name.startswith("dataflex/mix/proportion/") for name in m):
        shares = ", ".join(
            f"{name.rsplit('/', 1)[1]} {value:.0%}"
            for name, value in m.items()
            if name.startswith("dataflex/mix/proportion/")
        )
        line += f"  mixture: {shares}"
    if "dataflex/curriculum/uniform_reward_fraction" in m:
        line += (
            f"  curriculum: groups without signal {m['dataflex/curriculum/uniform_reward_fraction']:.0%}, "
            f"prompts seen {m.get('dataflex/curriculum/seen_fraction', 0):.0%}, "
            f"draw spread {m.get('dataflex/curriculum/draw/effective_fraction', 1):.0%}"
        )
    if validation:
        line += f"  validation {fmt(validation[0])}"
    return line


def values(steps: list[dict[str, Any]], name: str, skip_first: bool = False) -> list[float]:
    """The numeric values of metric ``name`` over ``steps``; ``skip_first`` leaves out the first value (the
    warm-up step) unless it is the only one, as :func:`~dataflex_lab.compare.costs.median_step_time` does: a
    validation record before training (step 0) carries no step time, so it is not the one skipped."""
    found = [float(r["metrics"][name]) for r in steps if isinstance(r["metrics"].get(name), (int, float))]
    return found[1:] if skip_first and len(found) > 1 else found


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def logged(steps: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The records of ``steps`` that carry a value of ``name`` (a validation metric: one every few steps)."""
    return [r for r in steps if isinstance(r["metrics"].get(name), (int, float))]


def reward_points(steps: list[dict[str, Any]], window: int, name: str) -> tuple[list[dict], list[dict]]:
    """The first and last ``window`` records carrying ``name``, never overlapping, the last never step 0.

    A validation metric is logged every few steps, so the windows count its points, not the steps: with 3
    points the table compares the first with the last, rather than averaging the same points twice.
    """
    points = logged(steps, name)
    trained = [r for r in points if r["step"] > 0]
    size = max(1, min(window, len(points) // 2))
    return points[:size], trained[-size:]


def step_span(records: list[dict[str, Any]]) -> list[int] | None:
    """``[first step, last step]`` of ``records`` (what a summary column's figure covers), or None."""
    return [records[0]["step"], records[-1]["step"]] if records else None


def summarize_arm(runs: list[list[dict[str, Any]]], window: int, names: HostMetrics) -> dict[str, Any]:
    """Per-arm figures averaged over seeds: reward at the start and end, step time, weight statistics.

    ``reward_first_steps`` / ``reward_last_steps`` say which steps (of the first seed) the two reward figures
    cover, so the table's labels say it too.
    """

    def over_seeds(fn: Any) -> float | None:
        found = [v for v in (fn(steps) for steps in runs) if v is not None]
        return _mean(found)

    def reward(steps: list[dict[str, Any]], end: int) -> float | None:
        return _mean(values(reward_points(steps, window, names.reward)[end], names.reward))

    first, last = reward_points(runs[0], window, names.reward) if runs else ([], [])
    summary = {
        "reward_metric": names.reward,
        "reward_first": over_seeds(lambda s: reward(s, 0)),
        "reward_last": over_seeds(lambda s: reward(s, 1)),
        "reward_first_steps": step_span(first),
        "reward_last_steps": step_span(last),
        # step 1 includes the framework's warm-up (first forward passes, lazy initialisation)
        "step_s_median": over_seeds(lambda s: _median(values(s, names.step_time, skip_first=True))),
        "hook_s_median": over_seeds(lambda s: _median(values(s, "dataflex/hook_time_s", skip_first=True))),
        "weight_mean": over_seeds(lambda s: _mean(values(s, "dataflex/weight/mean"))),
        "weight_std": over_seeds(lambda s: _mean(values(s, "dataflex/weight/std"))),
        "ess_fraction": over_seeds(lambda s: _mean(values(s, "dataflex/ess_fraction"))),
        "zero_weight_fraction": over_seeds(lambda s: _mean(values(s, "dataflex/zero_weight_fraction"))),
        "kept_fraction": over_seeds(lambda s: _mean(values(s, "dataflex/kept_fraction"))),
    }
    if summary["hook_s_median"] is not None and summary["step_s_median"]:
        summary["hook_share"] = summary["hook_s_median"] / summary["step_s_median"]
    allocation = allocation_summary(runs)
    if allocation:
        summary["allocation"] = allocation
    return summary


def allocation_summary(runs: list[list[dict[str, Any]]]) -> dict[str, Any] | None:
    """How an allocate arm split its rollouts: whether every step was even, and why (None for other arms)."""
    records = [r["metrics"] for steps in runs for r in steps if "dataflex/allocate/n_mean" in r["metrics"]]
    if not records:
        return None
    even = [m.get("dataflex/allocate/n_min") == m.get("dataflex/allocate/n_max") for m in records]
    return {
        "steps": len(records),
        "even_steps": sum(even),
        "fallback_steps": sum(1 for m in records if m.get("dataflex/allocate/fallback")),
        "seen_before_max": max(float(m.get("dataflex/allocate/seen_before", 0.0)) for m in records),
        "n": records[0].get("dataflex/allocate/n_mean"),
    }


def allocation_note(summaries: dict[str, dict[str, Any]]) -> str | None:
    """The closing sentence when an allocate arm split evenly at every step: the two arms trained alike.

    Says why (the allocator was never asked; or no prompt recurred, so the ledger could not tell prompts apart;
    or the allocator chose even counts) and what to change.
    """
    for arm, summary in summaries.items():
        allocation = summary.get("allocation")
        if not allocation or allocation["even_steps"] < allocation["steps"]:
            continue
        n = fmt(allocation["n"], 0)
        said = f"Arm {arm} split the budget evenly at every step ({n} rollouts per prompt), so it trained as uniform"
        if allocation["fallback_steps"] == allocation["steps"]:
            why = (
                "the allocator was never asked (every step was before warmup_step, or its output was invalid "
                "under on_invalid: uniform; see dataflex/allocate/fallback): lower the block's warmup_step below "
                "--steps, or fix what the allocator's error said"
            )
        elif allocation["seen_before_max"] == 0.0:
            why = (
                "no prompt came back, so the ledger had no solve rate to tell prompts apart (dataflex/allocate/"
                "seen_before stayed 0): run more --steps, or a --task with fewer train prompts, so that prompts recur "
                "within the run"
            )
        else:
            why = (
                "the allocator gave every prompt the same count from what the ledger knew: try another scorer or "
                "allocator (--scorer, --actuator), or a task whose prompts differ in difficulty"
            )
        return f"{said}: {why}."
    return None


def is_validation(metric: str) -> bool:
    """Whether ``metric`` is a held-out validation reward (verl's ``val-*/reward/mean@k``, TRL's eval)."""
    return (metric.startswith("val-") and "/reward/mean@" in metric) or metric == "eval_reward"


def reward_label(summary: dict[str, Any], end: str) -> str:
    """A reward column's label: which reward, and the step or steps its figure covers (e.g. ``step 0``)."""
    what = "held-out reward" if is_validation(summary.get("reward_metric", "")) else "reward"
    span = summary.get(f"reward_{end}_steps")
    if not span:
        return f"{what}, {end}"
    low, high = span
    return f"{what}, step {low}" if low == high else f"{what}, steps {low}-{high}"


def summary_table(summaries: dict[str, dict[str, Any]], window: int) -> str:
    """A Markdown table: one row per arm; the reward columns say which steps their figures cover."""
    first = next(iter(summaries.values()), {})
    header = (
        f"| arm | {reward_label(first, 'first')} | {reward_label(first, 'last')} | step time (median) | "
        "weight mean (loss unit) | weight std | ESS | zero-weight | hook share of step |"
    )
    lines = [header, "|" + " --- |" * 9]
    for arm, s in summaries.items():

        def pct(key: str, s: dict[str, Any] = s) -> str:
            return "-" if s.get(key) is None else f"{s[key]:.0%}"

        hook = "-" if s.get("hook_share") is None else f"{100 * s['hook_share']:.2f}%"
        lines.append(
            f"| {arm} | {fmt(s['reward_first'])} | {fmt(s['reward_last'])} | {fmt(s['step_s_median'], 2)} s | "
            f"{fmt(s['weight_mean'])} | {fmt(s['weight_std'])} | {pct('ess_fraction')} | "
            f"{pct('zero_weight_fraction')} | {hook} |"
        )
    return "\n".join(lines)


def compute_table(document: dict[str, Any], baseline: str, group_size: int) -> str:
    """Where each arm's rollouts went (:mod:`dataflex_lab.compare.costs`, from the ``dataflex/compute/*`` totals
    every arm logs), or why the table could not be made; the table also goes into ``document["compute"]``."""
    from .compare import CompareError
    from .compare.costs import compute_costs
    from .compare.readers import runs_from_demo

    try:
        costs = compute_costs(runs_from_demo(document), baseline=baseline, group_size=group_size)
    except CompareError as exc:
        return f"no compute table: {exc}"
    document["compute"] = costs.as_dict()
    return costs.markdown()


def demo_document(
    host: str, seeds: Sequence[int], runs: list[dict[str, Any]], settings: dict[str, Any]
) -> dict[str, Any]:
    """The ``--json`` document (format :data:`JSON_FORMAT`) of every arm and seed."""
    from .compare.readers import HOST_BASELINES

    first = seeds[0]
    return {
        "format": JSON_FORMAT,
        "host": host,
        "baseline": HOST_BASELINES.get(host),
        "seed": first,
        "seeds": list(seeds),
        "arms": {run["arm"]: run["steps"] for run in runs if run["seed"] == first},
        "runs": runs,
        "settings": settings,
    }


def comparison(document: dict[str, Any], baseline: str, metric: str | None = None) -> str:
    """``dataflex compare``'s Markdown table for a multi-seed demo (on ``metric``, default the reward), or why it
    could not be made.

    A comparison that cannot be made (a seed that logged no step, ...) is reported, not raised:
    the runs are done by then and their ``--json`` is still worth writing.
    """
    from .compare import CompareError, compare_runs

    try:
        return compare_runs(document, baseline=baseline, metrics=[metric] if metric else None).markdown()
    except CompareError as exc:
        return f"no comparison over seeds: {exc}"


def first_step_reaching(steps: list[dict[str, Any]], metric: str, level: float) -> int | None:
    """The first logged step whose ``metric`` is at least ``level``, or ``None`` if none is."""
    for record in steps:
        value = record["metrics"].get(metric)
        if isinstance(value, (int, float)) and value >= level:
            return int(record["step"])
    return None


def reach_table(
    document: dict[str, Any], metric: str, baseline: str, rollouts_per_step: int, fraction: float = 0.75
) -> str:
    """Steps and rollouts each arm needed to reach ``fraction`` of the baseline's improvement of ``metric``.

    The level is ``start + fraction * (final - start)``, with ``start`` and ``final`` the baseline's first and
    last logged values (means over its seeds): where the learning curves are still steep, so the steps to it
    say how fast an arm learns, not which seed ended highest. A seed that never reaches it counts as needing
    more than its last step (shown ``> N``).
    """
    curves = [values(r["steps"], metric) for r in document["runs"] if r["arm"] == baseline]
    curves = [c for c in curves if c]
    if not curves:
        return f"no {metric} logged by the {baseline} arm: no level to reach"
    start, final = statistics.fmean(c[0] for c in curves), statistics.fmean(c[-1] for c in curves)
    level = start + fraction * (final - start)
    lines = [
        f"steps to reach {metric} >= {level:.3f} ({fraction:.0%} of the way from the {baseline} arm's first value "
        f"{start:.3f} to its last {final:.3f}, means over seeds); {rollouts_per_step} rollouts per step",
        "",
        "| arm | steps, per seed | mean steps | mean rollouts |",
        "| --- | --- | --- | --- |",
    ]
    for arm in dict.fromkeys(run["arm"] for run in document["runs"]):
        reached = []
        shown = []
        for run in (r for r in document["runs"] if r["arm"] == arm):
            step = first_step_reaching(run["steps"], metric, level)
            last = max((r["step"] for r in run["steps"]), default=0)
            reached.append(step if step is not None else last)
            shown.append(str(step) if step is not None else f"> {last}")
        mean = statistics.fmean(reached)
        never = any(s.startswith(">") for s in shown)
        prefix = ">= " if never else ""
        lines.append(f"| {arm} | {', '.join(shown)} | {prefix}{mean:.1f} | {prefix}{mean * rollouts_per_step:.0f} |")
    return "\n".join(lines)


def _at(steps: list[dict[str, Any]], step: int, metric: str) -> float | None:
    for record in steps:
        if record["step"] == step:
            value = record["metrics"].get(metric)
            return float(value) if isinstance(value, (int, float)) else None
    return None


def plot(document: dict[str, Any], path: Path, names: HostMetrics, *, baseline: str, title: str) -> None:
    """:func:`figure` written to ``path`` as a PNG.

    :raises ImportError: matplotlib is not installed.
    """
    import matplotlib.pyplot as plt

    fig = figure(document, names, baseline=baseline, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(document: dict[str, Any], names: HostMetrics, *, baseline: str, title: str) -> Any:
    """Reward per step per arm (mean over seeds, band = min..max) and the DataFlex arm's weight std and ESS.

    :raises ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_reward, ax_weights) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    palette = ["#555555", "#1f77b4", "#d62728", "#2ca02c"]
    for index, arm in enumerate(dict.fromkeys(run["arm"] for run in document["runs"])):
        curves = [run["steps"] for run in document["runs"] if run["arm"] == arm]
        steps = [r["step"] for r in curves[0]]
        per_step = [[_at(curve, step, names.reward) for curve in curves] for step in steps]
        mean = [statistics.fmean([v for v in vals if v is not None] or [float("nan")]) for vals in per_step]
        color = palette[index % len(palette)]
        label = f"{arm} (mean of {len(curves)} seeds)" if len(curves) > 1 else arm
        ax_reward.plot(steps, mean, label=label, color=color, linewidth=1.8)
        if len(curves) > 1:
            low = [min((v for v in vals if v is not None), default=float("nan")) for vals in per_step]
            high = [max((v for v in vals if v is not None), default=float("nan")) for vals in per_step]
            ax_reward.fill_between(steps, low, high, color=color, alpha=0.15)
        if arm != baseline:
            for metric, style, name in (
                ("dataflex/weight/std", "-", "weight std"),
                ("dataflex/ess_fraction", "--", "ESS fraction"),
            ):
                points = [[v for v in (_at(c, s, metric) for c in curves) if v is not None] for s in steps]
                ax_weights.plot(steps, [statistics.fmean(p) if p else float("nan") for p in points], style,
                                color=color, label=f"{arm}: {name}")  # fmt: skip
    ax_reward.set_title(title, fontsize=10)
    ax_reward.set_ylabel("reward" if names.reward == "reward" else f"reward ({names.reward})")
    ax_reward.legend(loc="lower right", fontsize=8)
    ax_reward.grid(alpha=0.3)
    ax_weights.set_ylabel("DataFlex weights")
    ax_weights.set_xlabel("training step")
    ax_weights.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers, also in a short run
    ax_weights.legend(loc="best", fontsize=8)
    ax_weights.grid(alpha=0.3)
    fig.text(0.01, 0.005, "Toy run: mechanics and a direction, not a benchmark result.", fontsize=7, color="#666666")
    fig.tight_layout()
    return fig


def finish(
    document: dict[str, Any],
    *,
    names: HostMetrics,
    baseline: str,
    title: str,
    json_path: Path | None,
    plot_path: Path,
    say: Any,
    rollouts_per_step: int | None = None,
    group_size: int | None = None,
) -> dict[str, Any]:
    """The end of a demo: the summary table (and, over several seeds, the comparison), ``--json``, the plot.

    With ``rollouts_per_step``, also the steps and rollouts each arm needed to reach 3/4 of the baseline's
    improvement of the reward (:func:`reach_table`). With ``group_size`` (rollouts per prompt), also where each
    arm's rollouts went (:func:`compute_table`). Adds the per-arm ``summary`` to ``document`` and returns it.
    """
    document.setdefault("metric", names.reward)  # what `dataflex compare` on the --json compares by default
    arms = list(dict.fromkeys(run["arm"] for run in document["runs"]))
    # training steps: an evaluation before the first (step 0) is not one
    steps = max((sum(1 for r in run["steps"] if r["step"] > 0) for run in document["runs"]), default=0)
    window = max(1, min(5, steps // 3))
    summaries = {
        arm: summarize_arm([r["steps"] for r in document["runs"] if r["arm"] == arm], window, names) for arm in arms
    }
    document["summary"] = summaries
    say("\n" + summary_table(summaries, window))
    if group_size is not None:
        say("\n" + compute_table(document, baseline, group_size))
    note = short_run_note(steps)
    if note:
        say(note)
    allocation = allocation_note(summaries)
    if allocation:
        say(allocation)
    if len(document["seeds"]) > 1:
        say("\n" + comparison(document, baseline=baseline, metric=names.reward))
    if rollouts_per_step is not None:
        say("\n" + reach_table(document, names.reward, baseline, rollouts_per_step))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(document, indent=1) + "\n")
        say(f"\nmetrics of every step: {shown_path(json_path)}")
    try:
        plot(document, Path(plot_path), names, baseline=baseline, title=title)
        say(f"plot: {shown_path(plot_path)}")
    except ImportError:
        say("plot skipped: matplotlib is not installed (pip install matplotlib)")
    return document
