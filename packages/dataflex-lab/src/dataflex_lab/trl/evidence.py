"""``dataflex-trl evidence`` (``nox -s evidence``): every recipe that changes which rollouts are generated or trained,
against uniform sampling, on every task family, at equal rollouts, in one table.

Each (family, method, seed) is one real training run: TRL's GRPO on a tiny random Qwen2
(:func:`~dataflex_lab.trl.training_demo.train_arm`; ``uniform`` is TRL's plain trainer, every other TRL method
:class:`~dataflex_trl.DataFlexGRPOTrainer` with its block), or verl's fit loop for what TRL cannot run
(``allocate``, against verl's own plain trainer, :mod:`dataflex_lab.verl.evidence_run`). Every run scores the
family's held-out split with a fixed sampling seed (:mod:`.heldout`) and logs the compute counters.

The table (:func:`method_table`) compares each method with its baseline by :func:`~dataflex_lab.compare.compare_runs`
on the runs' document, the path ``dataflex compare`` takes: the rollouts to the family's held-out level (the
geometric mean of the per-seed ratios, its interval and p from one test), the AUC at equal rollouts, the wasted
share and the step time (:mod:`dataflex_lab.compare.costs`); Holm's adjustment runs across the whole table. The
same reading on optimizer steps and on modeled seconds (a stated cost model, ``--seconds-per-*``) comes from
:func:`~dataflex_lab.compare.cost_axes.reach_on_axes`, ``dataflex compare --cost-axes``'s path, as exploratory
columns. ``--lr``, ``--init-scale``, ``--temperature``, ``--eval-temperature`` and ``--grid`` set the training
setting (:class:`Setting`), each non-default one a campaign of its own (:func:`run_grid`).

Time: every finished run is written at once (``runs/<family>/<method>/seed<k>.json``) and a later campaign with the
same settings skips it, so ``--families``, ``--methods`` and ``--seeds`` slices add up and an interrupted campaign
resumes; ``--quick`` is CI's smoke test of the whole path (its own workdir), not evidence.

To add a method, add one entry to :data:`METHODS` (``mechanism: pilot`` landed this way:
``nox -s evidence -- --methods uniform,pilot`` adds its rows to the table).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from dataflex_core.mechanisms.pilot.settings import PILOT_COMMIT_BAND

from ..compare.cost_model import CostModel
from ..demo_report import PILOT_DEMO
from . import heldout

#: The baselines: TRL's plain GRPOTrainer and verl's plain trainer, prompts drawn uniformly.
UNIFORM, UNIFORM_VERL = "uniform", "uniform_verl"
#: The metric every run is compared on: the held-out reward, fixed sampling seed.
METRIC = heldout.METRIC
#: Completions per prompt (both hosts' task-family runs), and rollouts a plain step generates (8 prompts).
GROUP_SIZE = 8
ROLLOUTS_PER_STEP = 8 * GROUP_SIZE
#: Layout of a run's record; a record of another layout is not resumed from.
RECORD_FORMAT = 2
#: The framework each host's runs need, and the session that has it: verl's fit loop cannot run beside trl
#: (noxfile.TEST_ENVS), so its rows run in a venv of their own and write to the same workdir.
HOST_MODULES = {"trl": "trl", "verl": "verl"}
HOST_SESSIONS = {"trl": "nox -s evidence", "verl": "nox -s evidence_verl"}


def available_hosts() -> list[str]:
    """The hosts whose framework this interpreter can import."""
    import importlib.util

    return [host for host, module in HOST_MODULES.items() if importlib.util.find_spec(module) is not None]


@dataclass(frozen=True)
class Method:
    """One row of the table: the host it runs on, its demo options (``None``: the host's plain trainer, a baseline),
    what it is compared with, and what it is; ``varies`` names the method a sensitivity setting belongs to."""

    host: str
    options: dict[str, Any] | None
    baseline: str
    what: str
    varies: str | None = None


_GRESO = {"mechanism": "curriculum", "scorer": "greso", "scorer_params": {"exploration": 0.5, "min_keep": 0.05},
          "actuator": "temperature", "actuator_params": {"temperature": 1.0, "exploration": 0.0}}  # fmt: skip
#: GRESO's pre-rollout skipping as a filter's ``filter.draw`` block (docs/recipes.md#greso).
GRESO_DRAW = {
    "mechanism": "curriculum",
    "prompt_key": "index",
    "scorer": {"name": "greso", "params": _GRESO["scorer_params"]},
    "actuator": {"name": "temperature", "params": _GRESO["actuator_params"]},
}
_CURRICULUM = {"mechanism": "curriculum", "scorer": "solve_rate_ema", "scorer_params": {"alpha": 1.0},
               "actuator": "learnability"}  # fmt: skip
_FILTER = {"mechanism": "filter", "filter_params": {"on_short": "backfill"}}

#: Every method by name: the table's rows, then the sensitivity settings (``varies``), run when named.
METHODS: dict[str, Method] = {
    UNIFORM: Method("trl", None, UNIFORM, "TRL's plain GRPOTrainer: prompts drawn uniformly"),
    "curriculum": Method("trl", _CURRICULUM, UNIFORM, "solve_rate_ema (alpha 1) -> learnability (exploration 0.05)"),
    "curriculum_mopps": Method("trl", {"mechanism": "curriculum", "scorer": "mopps", "actuator": "learnability"},
                               UNIFORM, "mopps (Beta posterior, Thompson) -> learnability"),
    "curriculum_greso": Method("trl", _GRESO, UNIFORM, "greso (skip prompts with a zero-variance streak) -> temperature"),
    # DAPO's dynamic sampling: evict groups whose rewards all agree, refill from the uniform sampler; core's
    # max_rounds (4), then backfill with evicted groups rather than stop (early on most groups agree)
    "filter": Method("trl", _FILTER, UNIFORM, "group_reward_variance -> threshold_band, refill up to 4 rounds"),
    "filter_greso": Method("trl", {**_FILTER, "filter_params": {"on_short": "backfill", "draw": GRESO_DRAW}}, UNIFORM,
                           "the filter, its prompts drawn through the greso curriculum"),
    # Pilot-Commit: screen prompts with 2 pilot rollouts each, commit the rest of the group to those whose pilot
    # rewards vary; the demo's pilot block (demo_report.PILOT_DEMO: up to 4 stages, then backfill)
    "pilot": Method("trl", {"mechanism": "pilot"}, UNIFORM,
                    "group_reward_variance -> threshold_band on 2 pilot rollouts, the rest committed, 4 stages"),
    # Pilot-Commit as published (pilot.preset: pilot-commit: 3x the batch explored a round, pilots 25 % of the
    # group, the survivor buffer, 10 rounds, solved prompts evicted), admitting on the paper's band of the pilot
    # mean; a step still short backfills (the preset raises, which would end the run where nothing is in the band)
    "pilot_commit": Method("trl", {"mechanism": "pilot", "scorer": "group_solve_rate", "actuator": "threshold_band",
                                   "actuator_params": PILOT_COMMIT_BAND,
                                   "pilot_params": {"preset": "pilot-commit", "on_short": "backfill"}}, UNIFORM,
                           "pilot-commit preset: band [0.125, 0.75] on 2 pilots of 8, buffer, 10 rounds, backfill"),
    "select": Method("trl", {"mechanism": "select"}, UNIFORM, "control: advantage_magnitude -> topk_fraction 0.5"),
    "reweight": Method("trl", {"mechanism": "reweight"}, UNIFORM, "control: advantage_magnitude -> softmax"),
    # TRL groups completions by a fixed num_generations and refuses allocate: it runs on verl, against verl
    UNIFORM_VERL: Method("verl", None, UNIFORM_VERL, "verl's plain GRPO trainer (sync): prompts drawn uniformly"),
    "allocate": Method("verl", {"mechanism": "allocate"}, UNIFORM_VERL,
                       "solve_rate_posterior -> knapsack (per-prompt rollout counts, same budget)"),
    # sensitivity: one or two settings of each method, at the same seeds
    "curriculum_floor0.2": Method("trl", {**_CURRICULUM, "actuator_params": {"exploration": 0.2}}, UNIFORM,
                                  "curriculum, exploration floor 0.2", varies="curriculum"),
    "curriculum_alpha0.5": Method("trl", {**_CURRICULUM, "scorer_params": {"alpha": 0.5}}, UNIFORM,
                                  "curriculum, solve_rate_ema alpha 0.5", varies="curriculum"),
    "curriculum_mopps_floor0.2": Method("trl", {"mechanism": "curriculum", "scorer": "mopps",
                                                "actuator": "learnability", "actuator_params": {"exploration": 0.2}},
                                        UNIFORM, "curriculum_mopps, exploration floor 0.2", varies="curriculum_mopps"),
    "curriculum_greso_explore0.25": Method("trl", {**_GRESO, "scorer_params": {"exploration": 0.25, "min_keep": 0.05}},
                                           UNIFORM, "curriculum_greso, exploration 0.25", varies="curriculum_greso"),
    # the pilot's size, one key of the demo's block each: deeper (4 of the group's 8 rollouts screen a prompt, so a
    # prompt solved 1 time in 10 shows signal 34 % of the time instead of 18 %) or wider (4 prompts screened per
    # prompt the batch lacks: more admitted per stage, fewer backfilled); both spend more rollouts per trained group
    "pilot_rollouts4": Method("trl", {"mechanism": "pilot", "pilot_params": {**PILOT_DEMO, "rollouts": 4}}, UNIFORM,
                              "pilot, 4 pilot rollouts a screened prompt (of 8)", varies="pilot"),
    "pilot_prompts4": Method("trl", {"mechanism": "pilot", "pilot_params": {**PILOT_DEMO, "prompts": 4}}, UNIFORM,
                             "pilot, 4 prompts screened per prompt the batch lacks", varies="pilot"),
    # the filter's rounds around core's 4: fewer (more backfilled groups, fewer rollouts per step) or more
    "filter_r8": Method("trl", {"mechanism": "filter", "filter_params": {"max_rounds": 8, "on_short": "backfill"}},
                        UNIFORM, "filter, 8 rounds", varies="filter"),
    "filter_r2": Method("trl", {"mechanism": "filter", "filter_params": {"max_rounds": 2, "on_short": "backfill"}},
                        UNIFORM, "filter, 2 rounds", varies="filter"),
    "allocate_noinfo": Method("verl", {"mechanism": "allocate", "actuator_params": {"info_gain": False}},
                              UNIFORM_VERL, "allocate, value = non-zero-gradient probability only", varies="allocate"),
}  # fmt: skip
#: The table's methods (every method without ``varies``), in table order.
TABLE_METHODS = [name for name, method in METHODS.items() if method.varies is None]
#: Each family's held-out level for rollouts-to-target, chosen on uniform runs only, before any method was run
#: (docs/evidence.md#targets): about half-way from a fresh model's score to uniform's mean final value.
TARGETS = {"repeat": 0.15, "count": 0.3, "band": 0.15, "longtail": 0.1}
DEFAULT_TARGET = 0.15
#: What ``--quick`` runs: CI's smoke test of the whole path (train, resume, compare, table), not evidence.
QUICK = {"families": ["repeat"], "methods": [UNIFORM, "curriculum", "filter"], "seeds": [0, 1], "steps": 4,
         "val_every": 2, "workdir": Path("dataflex_evidence/quick")}  # fmt: skip
SMOKE_NOTE = (
    "SMOKE TEST (--quick): 2 seeds of 4 steps check that every part runs; the numbers below are not evidence "
    "(docs/evidence.md has the campaign's)."
)


@dataclass(frozen=True)
class Setting:
    """The training setting a campaign's runs share: the optimiser's learning rate, the family model's initial
    weight scale, and the rollout and held-out sampling temperatures. The defaults are the campaign's values before
    these were options, so its results reproduce as they were."""

    lr: float = 3e-3
    init_scale: float = 0.1
    temperature: float = 1.0
    #: ``None``: the held-out prompts are sampled at the rollout temperature.
    eval_temperature: float | None = None

    def __post_init__(self) -> None:
        for name, option in SETTING_OPTIONS.items():
            value = getattr(self, name)
            if value is None and name == "eval_temperature":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{option} {value!r} must be a positive number")

    def changed(self) -> dict[str, float]:
        """The values that differ from the default setting, by field."""
        default = Setting()
        return {name: getattr(self, name) for name in SETTING_OPTIONS if getattr(self, name) != getattr(default, name)}

    def label(self) -> str:
        """A folder name naming the changed values, e.g. ``lr0.005_init0.04``; ``""`` for the default setting."""
        return "_".join(f"{GRID_NAMES[name]}{value:g}" for name, value in self.changed().items())

    def options(self) -> str:
        """The campaign's options that select this setting (``""`` for the default)."""
        return "".join(f" {SETTING_OPTIONS[name]} {value:g}" for name, value in self.changed().items())


#: Each setting's command-line option, and its name in ``--grid`` and in a setting's folder name.
SETTING_OPTIONS = {"lr": "--lr", "init_scale": "--init-scale", "temperature": "--temperature",
                   "eval_temperature": "--eval-temperature"}  # fmt: skip
GRID_NAMES = {"lr": "lr", "init_scale": "init", "temperature": "temperature", "eval_temperature": "eval_temperature"}


def parse_grid(items: Sequence[str], base: Setting | None = None) -> list[Setting]:
    """``--grid lr=3e-3,5e-3 init=0.1,0.04``: every combination of the values named (the other values ``base``'s),
    in the order given, the first key varying slowest."""
    import itertools

    by_name = {short: name for name, short in GRID_NAMES.items()}
    axes: dict[str, list[float]] = {}
    for item in items:
        key, _, values = item.partition("=")
        if key not in by_name or not values:
            raise ValueError(f"--grid {item!r}: give KEY=V,V with KEY one of {', '.join(by_name)}")
        if by_name[key] in axes:
            raise ValueError(f"--grid names {key!r} twice")
        try:
            axes[by_name[key]] = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--grid {item!r}: the values must be numbers, e.g. {key}=0.1,0.04") from None
    base = base or Setting()
    settings = [replace(base, **dict(zip(axes, combo))) for combo in itertools.product(*axes.values())]
    return list(dict.fromkeys(settings))


@dataclass
class Campaign:
    """What one campaign (or one slice of it) runs and where it writes."""

    families: list[str] = field(default_factory=lambda: ["repeat", "count", "band", "longtail"])
    #: Default: the table's methods whose host this interpreter has (:func:`available_hosts`).
    methods: list[str] = field(
        default_factory=lambda: [m for m in TABLE_METHODS if METHODS[m].host in available_hosts()]
    )
    #: 30 paired seeds: the power docs/evidence.md#campaign states (about 1.7x detectable at 80 % after Holm).
    seeds: list[int] = field(default_factory=lambda: list(range(30)))
    steps: int = 60
    val_every: int = 5
    #: One level for every family; ``None``: each family's own (:data:`TARGETS`).
    target: float | None = None
    jobs: int = 1
    workdir: Path = Path("dataflex_evidence")
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    quick: bool = False
    #: The training setting every run uses (:class:`Setting`; a grid is one campaign per setting, :func:`run_grid`).
    setting: Setting = field(default_factory=Setting)
    #: The constants of the modeled-seconds axis (:mod:`dataflex_lab.compare.cost_model`); ``None``: the table reads
    #: rollouts and optimizer steps only. It changes no run, only the table.
    cost_model: CostModel | None = None

    def target_for(self, family: str) -> float:
        """The held-out level ``family``'s runs are timed to."""
        return self.target if self.target is not None else TARGETS.get(family, DEFAULT_TARGET)

    def check(self) -> None:
        from .. import task_families

        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; the methods are {', '.join(METHODS)}")
        hosts = available_hosts()
        missing = sorted({METHODS[m].host for m in self.methods} - set(hosts))
        if missing:
            names = [m for m in self.methods if METHODS[m].host in missing]
            raise ValueError(
                f"method(s) {names} run on {' and '.join(missing)}, which this environment lacks (verl's fit loop "
                f"cannot run beside trl): run them with {' / '.join(HOST_SESSIONS[h] for h in missing)} -- "
                f"--methods {','.join(names)} (same workdir: the table takes every host's runs)"
            )
        for name in self.families:
            task_families.structure_from(self.task_params.get(name), task_families.family(name))
        if self.target is not None and not 0.0 < self.target <= 1.0:
            raise ValueError(f"--target {self.target:g} is outside (0, 1]: it is a held-out reward level")
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(
                f"--seeds {self.seeds} must name at least 2 distinct seeds >= 0: the comparison is over seeds, paired"
            )
        verl = [m for m in self.methods if METHODS[m].host == "verl"]
        if self.setting.changed() and verl:
            raise ValueError(
                f"method(s) {verl} run on verl, whose runs take no --lr / --init-scale / --temperature / "
                f"--eval-temperature / --grid setting; run them at the default setting"
            )
        if self.val_every < 1 or self.steps < self.val_every:
            raise ValueError(f"--val-every {self.val_every} must be at least 1 and at most --steps {self.steps}")

    def key(self, family: str, method: str) -> dict[str, Any]:
        """What a run's record must match to be reused: everything that changes the run."""
        from .. import task_families

        task = task_families.family(family)
        structure = task_families.structure_from(self.task_params.get(family), task)
        spec = METHODS[method]
        return {
            "format": RECORD_FORMAT,
            "family": family,
            "structure": json.loads(json.dumps(structure.__dict__)),
            "host": spec.host,
            "options": spec.options,
            "steps": self.steps,
            "val_every": self.val_every,
            "samples": heldout.SAMPLES,
            # only a changed setting: records of the default setting keep the key they had before it was an option
            **({"setting": self.setting.changed()} if self.setting.changed() else {}),
        }

    def record_path(self, family: str, method: str, seed: int) -> Path:
        return self.workdir / "runs" / family / method / f"seed{seed}.json"


# -- running ---------------------------------------------------------------------------------------------


def run_one(campaign: Campaign, family: str, method: str, seed: int) -> dict[str, Any]:
    """One training run; its record (``arm``, ``seed``, ``steps`` as the demo format has them, its wall time)."""
    started = time.perf_counter()
    spec = METHODS[method]
    params = campaign.task_params.get(family)
    if spec.host == "verl":
        from ..verl.evidence_run import run_verl

        steps = run_verl(spec.options, name=method, family=family, task_params=params, steps=campaign.steps,
                         val_every=campaign.val_every, seed=seed, workdir=campaign.workdir / "verl" / family,
                         metric=METRIC)  # fmt: skip
    else:
        import torch

        from .. import task_families
        from .training_demo import DemoSettings, train_arm

        torch.set_num_threads(1)  # one run a core; the machine's other jobs keep the rest
        task = task_families.family(family)
        splits = task.build(task_families.structure_from(params, task), seed)
        setting = campaign.setting
        scorer = heldout.evaluation_callback(task, splits.held_out, every=campaign.val_every, run_seed=seed,
                                             temperature=setting.eval_temperature)  # fmt: skip
        stop = budget_stop(campaign.steps * ROLLOUTS_PER_STEP)
        settings = DemoSettings(**(spec.options or {}), task=family, task_params=params, steps=campaign.steps,
                                val_every=0, workdir=campaign.workdir / "trl" / family, lr=setting.lr,
                                init_scale=setting.init_scale, temperature=setting.temperature)  # fmt: skip
        arm = "baseline" if spec.options is None else method
        steps = heldout.merge_scores(train_arm(settings, arm, seed, lambda record: None, [stop, scorer]), scorer.scores)
    return {
        "arm": method,
        "seed": seed,
        "host": spec.host,
        "key": campaign.key(family, method),
        "wall_s": round(time.perf_counter() - started, 1),
        "steps": steps,
    }


def budget_stop(budget: int) -> Any:
    """A ``TrainerCallback`` that ends a run once it has generated ``budget`` rollouts (uniform's over its steps).

    The table compares at equal rollouts, cut at the budget every run reached, so what a filter generates past
    uniform's budget is never read: it stops there instead (a plain run, at 64 rollouts a step, at its last step).
    """
    from transformers import TrainerCallback

    from ..compute import total

    generated = total("rollouts_generated")

    class BudgetStop(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            spent = (logs or {}).get(generated, state.global_step * ROLLOUTS_PER_STEP)
            if "reward" in (logs or {}) and spent >= budget:  # a training step's log, not an evaluation's
                control.should_training_stop = True

    return BudgetStop()


def load_record(campaign: Campaign, family: str, method: str, seed: int) -> dict[str, Any] | None:
    """The finished run's record, ``None`` if not run; a record made with other settings is an error."""
    path = campaign.record_path(family, method, seed)
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("key") != campaign.key(family, method):
        raise ValueError(
            f"{path} was made with other settings ({_difference(record.get('key'), campaign.key(family, method))}); "
            "a campaign never mixes runs of different settings: use another --workdir, or delete that folder to "
            "rerun them"
        )
    return record


def _difference(found: Any, wanted: dict[str, Any]) -> str:
    if not isinstance(found, dict):
        return "a record of an older layout"
    keys = sorted(k for k in wanted if found.get(k) != wanted[k])
    return ", ".join(f"{k}: {found.get(k)!r} here, {wanted[k]!r} now" for k in keys)


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Atomically: a run interrupted while writing leaves no half record (it is rerun)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record) + "\n")
    os.replace(partial, path)


def _duration(seconds: float) -> str:
    if seconds < 59.5:
        return f"{max(int(round(seconds)), 1)} s"
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"


class Progress:
    """Runs done and left, and the time left from the mean wall time of this campaign's runs per host (TRL's runs
    ``jobs`` at a time, verl's one at a time)."""

    def __init__(
        self, todo: Sequence[tuple[str, str, int]], done_before: int, say: Callable[[str], None], jobs: int = 1
    ) -> None:
        self.jobs = max(jobs, 1)
        self.left = {host: sum(1 for _, m, _ in todo if METHODS[m].host == host) for host in ("trl", "verl")}
        self.total, self.done, self.say = len(todo) + done_before, done_before, say
        self.walls: dict[str, list[float]] = {"trl": [], "verl": []}

    def failed(self, family: str, method: str, seed: int, error: Exception) -> None:
        self.left[METHODS[method].host] -= 1
        self.total -= 1
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        self.say(f"  {family} {method} seed {seed}: FAILED, not kept ({first}); the next call reruns it")

    def finished(self, family: str, method: str, seed: int, record: dict[str, Any]) -> None:
        host = METHODS[method].host
        self.walls[host].append(record["wall_s"])
        self.left[host] -= 1
        self.done += 1
        known = [w for walls in self.walls.values() for w in walls]
        side_by_side = {"trl": min(self.jobs, self.left["trl"]) or 1, "verl": 1}
        estimate = sum(n * statistics.fmean(self.walls[h] or known) / side_by_side[h]
                       for h, n in self.left.items() if n)  # fmt: skip
        left = self.total - self.done
        eta = f", about {_duration(estimate)} left" if left else ""
        self.say(
            f"  [{self.done}/{self.total}] {family} {method} seed {seed}: {record['wall_s']:.0f} s, {_held_out(record)}"
            f"; {left} run{'s' if left != 1 else ''} left{eta}"
        )


def run_campaign(campaign: Campaign, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Every (family, method, seed) not run yet, then the table over every run in the workdir's families."""

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    campaign.check()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    if campaign.quick:
        say(SMOKE_NOTE)
    planned = [(f, m, s) for f in campaign.families for s in campaign.seeds for m in campaign.methods]
    done = [job for job in planned if load_record(campaign, *job) is not None]
    todo = [job for job in planned if job not in done]
    say(
        f"evidence campaign: {len(campaign.families)} famil{'y' if len(campaign.families) == 1 else 'ies'} x "
        f"{len(campaign.methods)} methods x {len(campaign.seeds)} seeds = {len(planned)} runs of {campaign.steps} "
        f"steps ({len(done)} done before, resumed; {len(todo)} to run, {campaign.jobs} at a time); held-out score "
        f"every {campaign.val_every} steps; records in {campaign.workdir / 'runs'}"
    )
    progress = Progress(todo, len(done), say, campaign.jobs)
    started = time.perf_counter()

    failed: list[str] = []

    def keep(job: tuple[str, str, int], outcome: Callable[[], dict[str, Any]]) -> None:
        try:
            record = outcome()
        except RuntimeError as exc:  # a framework that failed to start or crashed: the others go on
            failed.append(f"{job[0]} {job[1]} seed {job[2]}")
            progress.failed(*job, exc)
            return
        write_record(campaign.record_path(*job), record)
        progress.finished(*job, record)

    trl_jobs = [job for job in todo if METHODS[job[1]].host == "trl"]
    verl_jobs = [job for job in todo if METHODS[job[1]].host == "verl"]
    if campaign.jobs > 1 and len(trl_jobs) > 1:
        with ProcessPoolExecutor(campaign.jobs) as pool:
            futures = {pool.submit(run_one, campaign, *job): job for job in trl_jobs}
            for future in as_completed(futures):
                keep(futures[future], future.result)
    else:
        for job in trl_jobs:
            keep(job, lambda job=job: run_one(campaign, *job))
    for job in verl_jobs:  # one at a time: each starts its own Ray
        keep(job, lambda job=job: run_one(campaign, *job))
    say(f"\n{len(todo) - len(failed)} runs in {_duration(time.perf_counter() - started)}")
    if failed:
        say(f"{len(failed)} run(s) failed and were not kept ({'; '.join(failed)}): the same command reruns them")
    summary = report_campaign(campaign, out=out)
    if campaign.quick:
        say("\n" + SMOKE_NOTE)
    return summary


def setting_campaign(campaign: Campaign, setting: Setting) -> Campaign:
    """``campaign`` at ``setting``: the default setting in the workdir itself (where the campaign kept its runs
    before settings were options), any other in ``<workdir>/settings/<label>``, its runs, tables and plots apart."""
    workdir = campaign.workdir if not setting.changed() else campaign.workdir / "settings" / setting.label()
    return replace(campaign, setting=setting, workdir=workdir)


def run_grid(campaign: Campaign, settings: Sequence[Setting], *, report_only: bool = False,
             out: TextIO = sys.stdout) -> dict[str, Any]:  # fmt: skip
    """The campaign once per setting (each resumes on its own), then each setting's table; ``{label: summary}``."""
    results = {}
    for index, setting in enumerate(settings, start=1):
        at = setting_campaign(campaign, setting)
        if len(settings) > 1:
            print(f"\n# setting {index}/{len(settings)}: {_setting_text(setting)} ({at.workdir})", file=out, flush=True)
        results[setting.label() or "default"] = report_campaign(at, out) if report_only else run_campaign(at, out)
    return results


def _setting_dict(setting: Setting) -> dict[str, float | None]:
    return {name: getattr(setting, name) for name in SETTING_OPTIONS}


def _setting_text(setting: Setting) -> str:
    return ", ".join(f"{GRID_NAMES[name]} {getattr(setting, name)}" for name in SETTING_OPTIONS)


# -- the table -------------------------------------------------------------------------------------------


def family_document(campaign: Campaign, family: str) -> dict[str, Any]:
    """Every finished run of ``family`` in the workdir (every method, every seed) as one ``dataflex-demo/1``
    document: what ``dataflex compare`` reads to reproduce each row."""
    from .. import task_families
    from ..demo_report import JSON_FORMAT

    runs = []
    for method in METHODS:
        folder = campaign.workdir / "runs" / family / method
        for path in sorted(folder.glob("seed*.json")) if folder.is_dir() else []:
            seed = int(path.stem.removeprefix("seed"))
            record = load_record(campaign, family, method, seed)
            if record is not None:
                runs.append({k: record[k] for k in ("arm", "seed", "host", "wall_s", "steps")})
    task = task_families.family(family)
    structure = task_families.structure_from(campaign.task_params.get(family), task)
    return {
        "format": JSON_FORMAT,
        "host": "trl",
        "baseline": UNIFORM,
        "metric": METRIC,
        "seeds": sorted({r["seed"] for r in runs}),
        "runs": runs,
        "settings": {
            "task": task_families.describe(task.build(structure, 0)),
            "steps": campaign.steps,
            "val_every": campaign.val_every,
            "target": campaign.target_for(family),
            "setting": _setting_dict(campaign.setting),
            "methods": {m: {"host": METHODS[m].host, "options": METHODS[m].options, "baseline": METHODS[m].baseline}
                        for m in dict.fromkeys(r["arm"] for r in runs)},
        },
    }  # fmt: skip


def row(
    document: dict[str, Any], method: str, target: float, cost_model: CostModel | None = None
) -> dict[str, Any] | None:
    """One method against its baseline on the seeds both have, by ``compare_runs`` on each cost axis
    (:func:`~dataflex_lab.compare.cost_axes.reach_on_axes`, ``dataflex compare --cost-axes``'s path); ``None`` when
    fewer than 2 seeds are common. Rollouts carry the verdict; optimizer steps and modeled seconds (with a cost
    model) are exploratory readings of the same runs."""
    from ..compare import runs_from_demo
    from ..compare.cost_axes import ratio_summary, reach_on_axes
    from ..compare.costs import compute_costs

    base = METHODS[method].baseline
    seeds = sorted({r["seed"] for r in document["runs"] if r["arm"] == method}
                   & {r["seed"] for r in document["runs"] if r["arm"] == base})  # fmt: skip
    if len(seeds) < 2:
        return None
    on_axes = reach_on_axes(document, metric=METRIC, target=target, cost_model=cost_model, baseline=base,
                            arms=[base, method], seeds=seeds)  # fmt: skip
    metric = on_axes["rollouts"]
    ratio = metric.ratios[method]
    auc = next(a for a in metric.arms if a.arm == method).differences["auc"]
    reach = metric.reach
    exploratory = {x: r for x, r in ratio_summary(on_axes, method).items() if x != "rollouts"}
    picked = [r for r in runs_from_demo(document) if r.arm in (base, method) and r.seed in seeds]
    costs = compute_costs(picked, baseline=base, group_size=GROUP_SIZE).as_dict()["arms"]
    logs = None if math.isnan(ratio.ratio) else [math.log(reach[base].per_seed[s] / reach[method].per_seed[s])
                                                  for s in seeds]  # fmt: skip
    return {
        "method": method,
        "baseline": base,
        "host": METHODS[method].host,
        "seeds": seeds,
        "budget": metric.budget,
        "reached": {arm: sum(reach[arm].reached.values()) for arm in (base, method)},
        "ratio": {"value": ratio.ratio, "ci": list(ratio.ci), "p": ratio.p, "bound": ratio.bound,
                  "sd_log": None if logs is None else statistics.stdev(logs)},
        "auc": {"difference": auc.estimate, "ci": list(auc.ci), "p": auc.p, "sd": auc.sd,
                "baseline": next(a for a in metric.arms if a.arm == base).estimates["auc"].mean},
        "wasted_share": {arm: costs[arm]["wasted_share"]["mean"] for arm in (base, method)},
        "step_time_ratio": (costs[method]["step_time_ratio"] or {}).get("mean"),
        "generated_per_group": costs[method]["generated_per_group"]["mean"],
        "axes": exploratory,
    }  # fmt: skip


#: Each method's one pre-declared primary test: (family, cost axis). Declared at the commit that added it, from
#: what each paper claims and the regime it addresses (docs/evidence.md#primary), after the campaign of seeds 0-29
#: was seen: the confirmatory reading is of the next seeds run (30 on); every other row and test is exploratory.
PRIMARY = {
    # prompt selection for learnability: real RL data's always / never / learnable mix, rollouts to the level
    "curriculum": ("band", "rollouts"), "curriculum_mopps": ("band", "rollouts"),
    "curriculum_greso": ("band", "rollouts"), "filter_greso": ("band", "rollouts"),
    # DAPO's dynamic sampling claims a better step (every trained group with signal), not fewer rollouts
    "filter": ("band", "optimizer_steps"),
    # Pilot-Commit claims fewer cumulative rollouts than GRPO
    "pilot": ("band", "rollouts"), "pilot_commit": ("band", "rollouts"),
    # the controls: what reweighting or selecting within a batch does to the same reading
    "select": ("band", "rollouts"), "reweight": ("band", "rollouts"),
    # Knapsack RL: more gradient signal for the same rollout budget (verl)
    "allocate": ("band", "rollouts"),
}  # fmt: skip


def method_table(
    rows: Sequence[dict[str, Any]], alpha: float = 0.05, primary: Mapping[str, tuple[str, str]] = PRIMARY
) -> list[dict[str, Any]]:
    """``rows`` with their verdicts: each method's pre-declared ``primary`` test (its family and cost axis) is
    Holm-adjusted across the methods' primary tests and read as a verdict; every other row and test is
    exploratory (its p unadjusted, a lean at most). Each row states its power: the fold change its seeds detect
    with 80 % power at Holm's strictest level over the primary tests, from its spread of per-seed log ratios."""
    from ..compare import stats
    from ..compare.target import FEWER, MORE, NOT_SEPARATED

    out = [dict(r, ratio=dict(r["ratio"]), auc=dict(r["auc"])) for r in rows]
    tests = []
    for i, r in enumerate(out):
        declared = primary.get(r["method"])
        axis = declared[1] if declared is not None and declared[0] == r["family"] else None
        reading = r["ratio"] if axis in (None, "rollouts") else r.get("axes", {}).get(axis)
        if axis is not None and reading is not None:
            r["primary"] = {"axis": axis, "value": reading["value"], "p": reading["p"]}
            tests.append(i)
        else:
            r["primary"] = None
    adjusted = stats.holm_adjusted([out[i]["primary"]["p"] for i in tests])
    for i, p_holm in zip(tests, adjusted):
        test = out[i]["primary"]
        separated = p_holm < alpha and not math.isnan(test["value"])
        test["p_holm"] = p_holm
        test["verdict"] = NOT_SEPARATED if not separated else FEWER if test["value"] > 1 else MORE
    strictest = alpha / max(len(tests), 1)
    for r in out:
        sd = r["ratio"].get("sd_log")
        r["ratio"]["detectable"] = math.inf if sd is None else stats.detectable_ratio(sd, len(r["seeds"]), strictest)
        for test in (r["ratio"], r["auc"]):  # exploratory: a lean where the unadjusted p is below alpha
            test["verdict"] = "exploratory" + (" (lean)" if test["p"] < alpha else "")
    return out


def _interval(ci: Sequence[float], fmt: Callable[[float], str]) -> str:
    return "[" + ", ".join(("+inf" if v > 0 else "-inf") if math.isinf(v) else fmt(v) for v in ci) + "]"


def _detectable(ratio: float | None) -> str:
    return "—" if ratio is None or math.isinf(ratio) else f"{ratio:.2f}x"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def table_markdown(rows: Sequence[dict[str, Any]], targets: dict[str, float]) -> str:
    """The method-by-family table, one row per (family, method)."""
    from ..compare.cost_axes import ratio_cell

    lines = [
        "| family | method | seeds | reached (base / method) | rollouts to target, base / method [95% CI] | p | "
        "detectable at 80 % power | AUC Δ at equal rollouts [95% CI] | p | optimizer steps to target | p | "
        "modeled seconds to target | p | wasted share (base → method) | step time / base | verdict |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | --- | ---: | --- | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        ratio, auc = r["ratio"], r["auc"]
        n = len(r["seeds"])
        if math.isnan(ratio["value"]):
            shown = "reached at the start"
        else:
            bound = f"{ratio['bound']} " if ratio["bound"] else ""
            shown = f"{bound}{ratio['value']:.2f}x {_interval(ratio['ci'], lambda v: f'{v:.2f}')}"
        test = r.get("primary")
        if test is not None:
            axis = test["axis"].replace("_", " ")
            verdict = f"primary ({axis}, p Holm {_p(test['p_holm'])}): **{test['verdict']}**"
        else:
            verdict = "exploratory"
        wasted = r["wasted_share"]
        step = "—" if r["step_time_ratio"] is None else f"{r['step_time_ratio']:.2f}x"
        method = r["method"] + (" (verl)" if r["host"] == "verl" else "")
        axes = r.get("axes", {})
        exploratory = " | ".join(
            f"{ratio_cell(axes[x])} | {_p(axes[x]['p'])}" if x in axes else "— | —"
            for x in ("optimizer_steps", "modeled")
        )
        lines.append(
            f"| {r['family']} ({targets[r['family']]:g}) | `{method}` | {n} | {r['reached'][r['baseline']]}/{n} / "
            f"{r['reached'][r['method']]}/{n} | {shown} | {_p(ratio['p'])} | {_detectable(ratio.get('detectable'))} | "
            f"{auc['difference']:+.3f} {_interval(auc['ci'], lambda v: f'{v:+.3f}')} | {_p(auc['p'])} | "
            f"{exploratory} | {wasted[r['baseline']]:.0%} → {wasted[r['method']]:.0%} | {step} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def reproduce(campaign: Campaign, r: dict[str, Any]) -> str:
    """The two commands behind a row: the runs (a resumable slice) and the comparison of them."""
    seeds = _seed_text(r["seeds"])
    target = campaign.target_for(r["family"])
    runs = f"{campaign.workdir}/{r['family']}.runs.json"
    return (
        f"nox -s evidence -- --families {r['family']} --methods {r['baseline']},{r['method']} --seeds {seeds} "
        f"--steps {campaign.steps}{campaign.setting.options()}{_cost_options(campaign)}; "
        f"dataflex compare {runs} --arms "
        f"{r['baseline']},{r['method']} --seeds {','.join(map(str, r['seeds']))} --x rollouts --target {target:g} "
        f"--cost-axes{_cost_options(campaign)}"
    )


def _cost_options(campaign: Campaign) -> str:
    """The cost model's options, as ``dataflex compare`` and the campaign take them."""
    model = campaign.cost_model
    if model is None:
        return ""
    return (
        f" --seconds-per-rollout {model.per_rollout_s:g} --seconds-per-call {model.per_call_s:g} "
        f"--seconds-per-trained-rollout {model.per_trained_rollout_s:g}"
    )


def report_campaign(campaign: Campaign, out: TextIO = sys.stdout) -> dict[str, Any]:
    """The table (and the sensitivity table) from every run in the workdir of the campaign's families and methods;
    each family's document, the tables as Markdown and JSON, the plots. Nothing is trained."""

    def say(message: str = "") -> None:
        print(message, file=out, flush=True)

    rows: list[dict[str, Any]] = []
    documents = {}
    campaign.workdir.mkdir(parents=True, exist_ok=True)
    for family in campaign.families:
        document = family_document(campaign, family)
        documents[family] = document
        (campaign.workdir / f"{family}.runs.json").write_text(json.dumps(document) + "\n")
        present = {r["arm"] for r in document["runs"]}
        for method in [m for m in METHODS if m in present]:  # every method run here, whatever the slice
            if METHODS[method].baseline == method:
                continue
            found = row(document, method, campaign.target_for(family), campaign.cost_model)
            if found is None:
                say(f"  {family} {method}: fewer than 2 seeds shared with {METHODS[method].baseline}, no row yet")
            else:
                rows.append({"family": family, **found})
        _plot(campaign, family, document, say)
    if not rows:
        say(f"\nno method has 2 seeds shared with its baseline in {campaign.workdir} yet: no table (run the methods)")
        return {"table": [], "sensitivity": [], "targets": {f: campaign.target_for(f) for f in campaign.families}}
    targets = {f: campaign.target_for(f) for f in campaign.families}
    main = method_table([r for r in rows if METHODS[r["method"]].varies is None])
    sensitivity = method_table([r for r in rows if METHODS[r["method"]].varies is not None])
    text = ""  # a workdir of sensitivity settings only (with their baseline) has no main table
    if main:
        text += "## Method by family\n\n" + table_markdown(main, targets) + "\n"
    if sensitivity:
        text += "## Sensitivity (same seeds)\n\n" + table_markdown(sensitivity, targets) + "\n"
    text += _how_to_read(sum(r["primary"] is not None for r in main)) + "\n## Reproduce\n\n"
    text += "\n".join(f"- {r['family']} `{r['method']}`: `{reproduce(campaign, r)}`" for r in main + sensitivity)
    say("\n" + text)
    (campaign.workdir / "table.md").write_text(text + "\n")
    cost_model = None if campaign.cost_model is None else campaign.cost_model.as_dict()
    summary = {"table": main, "sensitivity": sensitivity, "targets": targets,
               "settings": {"steps": campaign.steps, "val_every": campaign.val_every, "group_size": GROUP_SIZE,
                            "cost_model": cost_model, "setting": _setting_dict(campaign.setting)}}  # fmt: skip
    (campaign.workdir / "table.json").write_text(json.dumps(summary, indent=1) + "\n")
    say(f"\ntables: {campaign.workdir / 'table.md'}; each family's runs: {campaign.workdir}/<family>.runs.json")
    return summary


def _how_to_read(primary: int) -> str:
    return (
        "How to read it: each row is `dataflex compare` of the method against its baseline on the seeds both ran, "
        "at equal rollouts (every run cut at the budget all reached). Rollouts to target: the geometric mean over "
        "seeds of base / method (above 1: the method needed fewer), a run that never reached the level within the "
        "budget counted at the budget (`>=`: only baseline runs did not reach it, `<=`: only the method's, `?`: "
        "both, which can bias the ratio either way); AUC Δ: the held-out curve's mean height over the budget, "
        "method minus base. Optimizer steps and modeled seconds to target (the cost model in table.json's "
        "settings; docs/evidence.md#cost-model) are the same reading on the other two cost axes. Each interval is "
        "the inverted test that gives its p (it excludes 1x or 0 exactly when p < 0.05). Verdicts: each method has "
        "one pre-declared primary test, its family and axis (`PRIMARY`, docs/evidence.md#primary), adjusted by "
        f"Holm over the table's {primary} primary tests; every other row and p is exploratory, unadjusted, a lean "
        "at most. Detectable at 80 % power: the fold change in rollouts (either way) the row's seeds would "
        "separate at Holm's strictest level, from the row's spread of per-seed log ratios (a paired t "
        "approximation): a 'not separated' below it says little. Wasted share: trained rollouts in groups whose "
        "rewards all agree; step time: the median step (warm-up excluded), paired by seed.\n"
    )


def _plot(campaign: Campaign, family: str, document: dict[str, Any], say: Callable[[str], None]) -> None:
    """The family's held-out curves against rollouts for the table's TRL methods, on the seeds all of them ran."""
    from ..compare import CompareError, compare_runs

    arms = [m for m in TABLE_METHODS if METHODS[m].host == "trl" and any(r["arm"] == m for r in document["runs"])]
    seeds = set.intersection(*({r["seed"] for r in document["runs"] if r["arm"] == m} for m in arms)) if arms else set()
    if len(arms) < 2 or len(seeds) < 2:
        return
    try:
        compare_runs(document, baseline=UNIFORM, arms=arms, seeds=sorted(seeds), metrics=[METRIC], x="rollouts",
                     n_boot=2000).plot(campaign.workdir / f"{family}.png")  # fmt: skip
    except CompareError as exc:  # matplotlib missing
        say(f"plot of {family} skipped: {exc}")


def _held_out(record: dict[str, Any]) -> str:
    values = [r["metrics"][METRIC] for r in record["steps"] if METRIC in r["metrics"]]
    return f"held-out {values[0]:.3f} -> {values[-1]:.3f}" if values else "no held-out score logged"


def _seed_text(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


# -- the command -----------------------------------------------------------------------------------------


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``K`` (seeds 0 to K-1), a range ``A-B`` (both included) or a list ``A,B,C``."""
    try:
        if "," in text:
            return [int(part) for part in text.split(",")]
        if "-" in text.strip("-"):
            first, last = text.split("-", 1)
            return list(range(int(first), int(last) + 1))
        return list(range(int(text)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give K (seeds 0..K-1), A-B or A,B,C") from None


def _evidence(args: argparse.Namespace) -> int:
    """Run (or report) the campaign the options name; bad options or a failed run are one line and exit 2."""
    from ..compare.cost_model import from_options
    from ..demo_report import run_command

    def campaign() -> object:
        options: dict[str, Any] = dict(QUICK, quick=True) if args.quick else {}
        for key in ("families", "methods", "seeds", "steps", "val_every", "target", "jobs"):
            value = getattr(args, key)
            if value is not None:
                options[key] = value
        if args.workdir is not None:
            options["workdir"] = Path(args.workdir)
        setting = Setting(**{name: getattr(args, name) for name in SETTING_OPTIONS if getattr(args, name) is not None})
        grid = parse_grid(args.grid, setting) if args.grid else [setting]
        cost_model = from_options(args.seconds_per_rollout, args.seconds_per_call, args.seconds_per_trained_rollout)
        if cost_model is not None:
            options["cost_model"] = cost_model
        if args.task_params:
            try:
                options["task_params"] = json.loads(args.task_params)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--task-params is not valid JSON ({exc.msg}): {args.task_params!r}") from None
        planned = Campaign(**options)
        if grid == [Setting()]:  # today's setting: the campaign exactly as before settings were options
            return report_campaign(planned) if args.report_only else run_campaign(planned)
        return run_grid(planned, grid, report_only=args.report_only)

    return run_command("dataflex-trl", "trl", campaign, command="evidence")


def add_evidence(subparsers: argparse._SubParsersAction, name: str = "evidence") -> argparse.ArgumentParser:
    """Add ``dataflex-trl evidence`` (the ``dataflex.cli`` entry point ``dataflex-trl.evidence``)."""
    evidence = subparsers.add_parser(
        name,
        help="every recipe against uniform on every task family at equal rollouts, over paired seeds: one table",
        description="Train every method (uniform, the curricula, the filters, select and reweight with TRL; allocate "
        "with verl) on each task family for each seed on the CPU, then compare each with its baseline at equal "
        "rollouts: rollouts to each family's held-out level and the AUC, paired by seed, Holm across the table "
        "(docs/evidence.md). Finished runs are kept and skipped on the next call, so slices add up and a stopped "
        "campaign resumes.",
    )
    add_arguments(evidence)
    evidence.set_defaults(func=_evidence)
    return evidence


def add_arguments(evidence: argparse.ArgumentParser) -> None:
    """The campaign's options, on ``evidence``."""
    from ..cli import _comma_list as comma_list

    evidence.add_argument("--families", type=comma_list(str), metavar="F,F", help="task families (default: all)")
    evidence.add_argument("--methods", "--recipes", type=comma_list(str), metavar="M,M",
                          help=f"methods (default: the table's, {', '.join(TABLE_METHODS)}; sensitivity settings "
                          "by name)")  # fmt: skip
    evidence.add_argument("--seeds", type=parse_seeds, metavar="K|A-B|A,B", help="seeds: K (0..K-1), A-B or A,B,C "
                          "(default 0-29)")  # fmt: skip
    evidence.add_argument("--steps", type=int, help="training steps per run (default 60)")
    evidence.add_argument("--val-every", type=int, metavar="N", help="held-out score every N steps (default 5)")
    evidence.add_argument("--target", type=float, help="held-out level for rollouts-to-target, every family "
                          f"(default: {', '.join(f'{f} {t:g}' for f, t in TARGETS.items())})")  # fmt: skip
    evidence.add_argument("--jobs", type=int, help="TRL runs side by side, one thread each (default 1)")
    evidence.add_argument("--task-params", metavar="JSON", help='per family, e.g. \'{"band": {"difficulty": [1, 4]}}\'')
    evidence.add_argument("--lr", type=float, help="learning rate (default 3e-3)")
    evidence.add_argument("--init-scale", dest="init_scale", type=float, metavar="STD",
                          help="the model's initial weight scale, std of its random weights (default 0.1)")  # fmt: skip
    evidence.add_argument("--temperature", type=float, help="rollout sampling temperature (default 1.0)")
    evidence.add_argument("--eval-temperature", dest="eval_temperature", type=float, metavar="T",
                          help="held-out sampling temperature (default: the rollout temperature)")  # fmt: skip
    evidence.add_argument("--grid", nargs="+", metavar="KEY=V,V", help="run every combination, e.g. --grid "
                          "lr=3e-3,5e-3 init=0.1,0.04 (keys lr, init, temperature, eval_temperature); each setting "
                          "other than the default in <workdir>/settings/<label>, resumed on its own")  # fmt: skip
    evidence.add_argument("--seconds-per-rollout", type=float, metavar="S", help="cost model of the modeled-seconds "
                          "axis: seconds per rollout generated (all three --seconds-per-* or none; "
                          "docs/evidence.md#cost-model)")  # fmt: skip
    evidence.add_argument("--seconds-per-call", type=float, metavar="S",
                          help="cost model: seconds per generation call in sequence")  # fmt: skip
    evidence.add_argument("--seconds-per-trained-rollout", type=float, metavar="S",
                          help="cost model: seconds per rollout trained")  # fmt: skip
    evidence.add_argument("--report-only", action="store_true",
                          help="train nothing: the tables again from the workdir's finished runs")  # fmt: skip
    evidence.add_argument("--quick", action="store_true", help="CI's smoke test, not evidence: 1 family, 3 methods, "
                          "2 seeds, 4 steps, in dataflex_evidence/quick")  # fmt: skip
    evidence.add_argument("--workdir", help="runs, tables, plots (default ./dataflex_evidence)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dataflex_lab.trl.evidence``: the campaign where ``dataflex-trl`` is not installed (verl's venv,
    ``nox -s evidence_verl``)."""
    parser = argparse.ArgumentParser(prog="python -m dataflex_lab.trl.evidence", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return _evidence(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
