"""Run verl's own GRPO entry point on the CPU with the tiny model and the toy task.

:func:`prepare_workspace` writes the model, tokenizer, dataset and agent-loop
file a run needs; :func:`overrides` turns a :class:`RunSpec` into verl's hydra
overrides; :func:`harness_env` is the environment that makes every verl
process load the harness. :func:`run_entry_point` runs ``python -m
verl.trainer.main_ppo`` in a subprocess (what a user runs);
:func:`run_in_process` runs verl's ``TaskRunnerV1`` from this
process, on an already started Ray, so tests share one cluster. Both return
the metrics verl's file logger wrote, one record per step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import task_families
from . import alternate, verl_internals
from . import task as task_module
from .model import CHAT_TOKENS, FAMILY_SPEC, build_model_and_tokenizer, family_alphabet
from .names import AGENT_LOOP_NAME, ROLLOUT_NAME, WEIGHT_SYNC_BACKEND

#: The module every verl process imports (``VERL_USE_EXTERNAL_MODULES``).
PLUGIN_MODULE = "dataflex_lab.verl.cpu_loop.plugin"
#: The agent-loop manager of legacy-line runs (verl's own, with the trajectory info the keyed agent loop needs).
LEGACY_AGENT_LOOP_MANAGER = "dataflex_lab.verl.cpu_loop.legacy_agent_loop.TrajectoryAgentLoopManager"
#: Logical GPUs Ray advertises; each stands for one CPU worker slot of verl's resource pool (the most
#: actor workers a run can ask for, :attr:`RunSpec.workers`).
RAY_GPUS = 2
#: Ray CPUs advertised (TransferQueue, reward, agent loop and task runner actors each ask for some).
RAY_CPUS = 32
#: Logical GPUs of a one-step-off run's rollout replica (``hybrid_engine=false``: not on the actor's).
ONE_STEP_OFF_ROLLOUT_GPUS = 1
#: Logical GPUs the Ray of a one-step-off run advertises: the most actor workers, and the rollout replica's.
ONE_STEP_OFF_GPUS = RAY_GPUS + ONE_STEP_OFF_ROLLOUT_GPUS
#: The CPU weight-sync backend of the separated trainers, loaded through verl's ``custom_backend_module``.
WEIGHT_SYNC_MODULE = "dataflex_lab.verl.cpu_loop.weight_sync"
#: verl's entry-point module of each :attr:`RunSpec.entry_point` and the config it composes.
ENTRY_POINTS = {
    "main_ppo": ("verl.trainer.main_ppo", "ppo_trainer"),
    "one_step_off": ("verl.experimental.one_step_off_policy.main_ppo", "one_step_off_ppo_trainer"),
}


@dataclass
class Workspace:
    """Files a run reads: the model and tokenizer folders, the dataset and the agent-loop declaration."""

    root: Path
    model: Path
    tokenizer: Path
    train_files: Path
    val_files: Path
    agent_loop_config: Path
    #: ``data.max_prompt_length`` and ``data.max_response_length``: what the dataset's prompts and answers need.
    max_prompt_length: int = 16
    max_response_length: int = task_module.SCORED_CHARS + 4


def prepare_workspace(
    root: str | Path,
    *,
    model_seed: int = 0,
    data_seed: int = 0,
    task: str = "echo",
    train_rows: int = 256,
    task_params: dict[str, Any] | None = None,
) -> Workspace:
    """Write everything a run needs under ``root`` (reused when already there for the same settings).

    :param task: ``echo`` (the plain toy task), ``mixed`` (echo prompts with solved and unsolvable ones,
        for ``mechanism: curriculum``; :mod:`.task`) or a task family (:mod:`dataflex_lab.task_families`: its
        train prompts, its held-out split as the validation set, the family model and alphabet).
    :param train_rows: prompts in the train set (a task family's come from ``task_params``).
    :param task_params: a task family's ``--task-params``.
    """
    root = Path(root).resolve()
    marker = root / "workspace.json"
    wanted: dict[str, Any] = {"model_seed": model_seed, "data_seed": data_seed, "format": 1}
    if (task, train_rows) != ("echo", 256):  # the plain workspace's marker stays as it was
        wanted.update(task=task, train_rows=train_rows)
    family = task_families.FAMILIES.get(task)
    if family is not None:
        wanted.update(task_params=task_params or {})
    model_dir, tokenizer_dir = root / "model", root / "tokenizer"
    train, val = root / "data" / "train.parquet", root / "data" / "val.parquet"
    agent_loops = root / "agent_loops.yaml"
    splits = None if family is None else family.build(task_families.structure_from(task_params, family), data_seed)
    if not (marker.exists() and json.loads(marker.read_text()) == wanted):
        root.mkdir(parents=True, exist_ok=True)
        if splits is None:
            build_model_and_tokenizer(root, model_seed)
            task_module.write_dataset(root / "data", seed=data_seed, task=task, train_rows=train_rows)
        else:
            build_model_and_tokenizer(root, model_seed, FAMILY_SPEC, family_alphabet(family))
            task_module.write_family_dataset(root / "data", splits)
        agent_loops.write_text(
            f"- name: {AGENT_LOOP_NAME}\n  _target_: dataflex_lab.verl.cpu_loop.agent_loop.KeyedSingleTurnAgentLoop\n"
        )
        marker.write_text(json.dumps(wanted))
    workspace = Workspace(root, model_dir, tokenizer_dir, train, val, agent_loops)
    if splits is not None:
        workspace.max_prompt_length = CHAT_TOKENS + max(len(p.text) for p in splits.train + splits.held_out)
        workspace.max_response_length = family.response_length(splits.structure)
    return workspace


@dataclass
class RunSpec:
    """One training run: which trainer, the ``dataflex:`` block (if any), its size and its seed."""

    trainer_mode: str = "sync"
    #: ``trainer.use_v1``: verl's V1 trainers (``trainer_mode``), or its legacy ``RayPPOTrainer`` line.
    use_v1: bool = True
    dataflex: dict[str, Any] | None = None
    steps: int = 2
    seed: int = 0
    prompts_per_step: int = 8
    samples_per_prompt: int = 4
    #: Actor workers (data-parallel ranks, gloo on logical GPUs): verl splits each batch between them, and its
    #: V1 line appends ``is_padding`` rows when the batch does not divide evenly.
    workers: int = 1
    #: Prompts per PPO mini-batch (``actor.ppo_mini_batch_size``); ``None``: the whole step's batch. One that
    #: does not divide ``prompts_per_step`` makes verl's V1 line pad the batch to whole mini-batches.
    mini_batch_prompts: int | None = None
    loss_agg_mode: str = "token-mean"
    lr: float = 1e-2
    #: ``torch.optim`` class of the actor (``SGD`` makes equality tests well conditioned: an Adam
    #: first step moves each weight by about ``lr`` whatever the gradient's size, float noise included).
    optimizer: str = "AdamW"
    experiment: str = "run"
    #: Where checkpoints go (``trainer.default_local_dir``); ``None``: under the workspace.
    checkpoint_dir: Path | None = None
    save_freq: int = -1
    resume_mode: str = "disable"
    #: Extra hydra overrides, appended last (they win).
    extra: list[str] = field(default_factory=list)
    #: verl's entry point (:data:`ENTRY_POINTS`): ``main_ppo`` (V1 or legacy by ``use_v1``), or ``one_step_off``
    #: (``OneStepOffRayTrainer``, a legacy-line trainer: needs ``use_v1=False``).
    entry_point: str = "main_ppo"
    #: Log the ``dataflex/compute/*`` counters from verl's batch on a run without DataFlex (the demo's baseline
    #: arm; :func:`~dataflex_lab.verl.cpu_loop.verl_internals.install_compute_counters`).
    compute_counters: bool = False
    #: ``odd`` or ``even``: a DataFlex trainer (either line) runs DataFlex only on the steps of that parity, verl's
    #: own advantage step alone on the others (the ``fit`` benches' paired measure, :mod:`.alternate`); ``None``:
    #: every step.
    dataflex_on_steps: str | None = None


def hydra_value(value: Any) -> str:
    """A Python value in hydra's override grammar (bare dict keys, quoted strings, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(inner)}" for key, inner in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(inner) for inner in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a hydra override value")


def dataflex_overrides(block: dict[str, Any] | None) -> list[str]:
    """The ``dataflex:`` block as ``+dataflex.KEY=VALUE`` overrides (verl's config is in struct mode)."""
    return [f"+dataflex.{key}={hydra_value(value)}" for key, value in (block or {}).items()]


def overrides(spec: RunSpec, workspace: Workspace) -> list[str]:
    """verl hydra overrides for ``spec`` on the CPU harness (everything offline, ``spec.workers`` CPU workers)."""
    if not 1 <= spec.workers <= RAY_GPUS:
        raise ValueError(f"RunSpec.workers={spec.workers}: the harness's Ray offers 1 to {RAY_GPUS} actor workers")
    bs = spec.prompts_per_step
    mini_rows = (spec.mini_batch_prompts or bs) * spec.samples_per_prompt
    if mini_rows % spec.workers:
        raise ValueError(
            f"RunSpec: a PPO mini-batch of {mini_rows} rows does not split across {spec.workers} workers; "
            "choose mini_batch_prompts * samples_per_prompt divisible by workers"
        )
    # one micro-batch per mini-batch on each rank; it also divides each rank's (possibly padded) share of the batch
    micro_rows = mini_rows // spec.workers
    checkpoints = spec.checkpoint_dir or workspace.root / "checkpoints" / spec.experiment
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={workspace.train_files}",
        f"data.val_files={workspace.val_files}",
        f"data.train_batch_size={bs}",
        f"data.max_prompt_length={workspace.max_prompt_length}",
        f"data.max_response_length={workspace.max_response_length}",
        "data.dataloader_num_workers=0",
        f"data.seed={spec.seed}",
        f"actor_rollout_ref.model.path={workspace.model}",
        f"actor_rollout_ref.model.tokenizer_path={workspace.tokenizer}",
        "actor_rollout_ref.model.use_remove_padding=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.actor.strategy=fsdp2",
        # FSDP computes in bf16 unless told otherwise: on a CPU that is slower, and its rounding makes two
        # identical runs differ by a few percent of an update (embedding gradients summed in batch order)
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
        f"actor_rollout_ref.actor.fsdp_config.seed={spec.seed}",
        f"actor_rollout_ref.actor.optim.lr={spec.lr}",
        f"actor_rollout_ref.actor.optim.optimizer={spec.optimizer}",
        *(["actor_rollout_ref.actor.optim.weight_decay=0.0"] if spec.optimizer == "SGD" else []),
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec.mini_batch_prompts or bs}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_rows}",
        f"actor_rollout_ref.actor.loss_agg_mode={spec.loss_agg_mode}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_rows}",
        f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.n={spec.samples_per_prompt}",
        f"actor_rollout_ref.rollout.seed={spec.seed}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP_NAME}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={workspace.agent_loop_config}",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={Path(task_module.__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={spec.workers}",
        "trainer.logger=[file]",
        "trainer.project_name=dataflex_cpu",
        f"trainer.experiment_name={spec.experiment}",
        f"trainer.total_training_steps={spec.steps}",
        "trainer.total_epochs=1000",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.save_freq={spec.save_freq}",
        f"trainer.resume_mode={spec.resume_mode}",
        f"trainer.default_local_dir={checkpoints}",
        f"trainer.v1.trainer_mode={spec.trainer_mode}",
        f"trainer.use_v1={hydra_value(spec.use_v1)}",
        *(
            []
            if spec.use_v1
            else [f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={LEGACY_AGENT_LOOP_MANAGER}"]
        ),
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"ray_kwargs.ray_init.num_cpus={RAY_CPUS}",
        f"+ray_kwargs.ray_init.num_gpus={RAY_GPUS}",
        *(one_step_off_overrides() if spec.entry_point == "one_step_off" else []),
        *dataflex_overrides(spec.dataflex),
        *spec.extra,
    ]


def one_step_off_overrides() -> list[str]:
    """What verl's one-step-off trainer needs on the CPU: rollout on a replica of its own, the CPU weight sync."""
    return [
        "actor_rollout_ref.hybrid_engine=false",
        "rollout.nnodes=1",
        f"rollout.n_gpus_per_node={ONE_STEP_OFF_ROLLOUT_GPUS}",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={WEIGHT_SYNC_BACKEND}",
        f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={WEIGHT_SYNC_MODULE}",
        # the entry point starts its own Ray: the actor's and the rollout replica's logical GPUs
        f"++ray_kwargs.ray_init.num_gpus={ONE_STEP_OFF_GPUS}",
    ]


def harness_env(modules: Sequence[str] = ()) -> dict[str, str]:
    """Environment every verl process of a harness run needs; ``modules`` are imported beside the harness."""
    return {
        "VERL_USE_EXTERNAL_MODULES": ",".join([PLUGIN_MODULE, *modules]),
        "VERL_PLATFORM": "cpu",
        # verl registers its FSDP engine for cuda/npu only; the CPU platform reuses the cuda entry
        "VERL_ENGINE_DEVICE": "cuda",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "RAY_DEDUP_LOGS": "0",
        "WANDB_MODE": "disabled",
        # TransferQueue warns on every request that 2 cores are fewer than its default thread count
        "TQ_LOGGING_LEVEL": "ERROR",
    }


def run_env(
    metrics_file: str | Path, loss_probe_dir: str | Path | None = None, spec: RunSpec | None = None
) -> dict[str, str]:
    """Environment of one run: where verl's file logger writes, for tests where the loss probe records, and
    whether the harness counts the compute of a run without DataFlex (``spec.compute_counters``)."""
    env = {"VERL_FILE_LOGGER_PATH": str(Path(metrics_file).resolve())}
    if loss_probe_dir is not None:
        env[verl_internals.LOSS_PROBE_ENV] = str(Path(loss_probe_dir).resolve())
    if spec is not None and spec.compute_counters:
        if spec.dataflex is not None:
            raise ValueError(
                "RunSpec.compute_counters is for runs without DataFlex: a dataflex: block logs its own "
                "dataflex/compute/* counters, which the harness's would overwrite; leave it False there"
            )
        env[verl_internals.COMPUTE_COUNTERS_ENV] = "1"
    if spec is not None and spec.dataflex_on_steps is not None:
        alternate.parity(spec.dataflex_on_steps)
        if spec.dataflex is None:
            raise ValueError(
                "RunSpec.dataflex_on_steps alternates a DataFlex trainer's step (V1 or legacy line): it needs a "
                "dataflex: block"
            )
        env[alternate.ALTERNATE_ENV] = spec.dataflex_on_steps
    return env


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """verl's file-logger JSON lines -> ``[{"step": N, "metrics": {...}}, ...]`` in step order."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            records.append({"step": int(item["step"]), "metrics": item["data"]})
    return sorted(records, key=lambda r: r["step"])


def run_entry_point(
    spec: RunSpec,
    workspace: Workspace,
    metrics_file: str | Path,
    *,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    log_file: str | Path | None = None,
    poll_s: float = 0.5,
    extra_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``python -m verl.trainer.main_ppo`` with the harness; calls ``on_step`` as each step's metrics land.

    verl's own output goes to ``log_file`` (or is discarded). Raises :class:`RuntimeError`
    with the tail of that log when verl exits non-zero.
    """
    metrics_file = Path(metrics_file)
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    metrics_file.unlink(missing_ok=True)
    env = {**os.environ, **harness_env(), **run_env(metrics_file, spec=spec), **(extra_env or {})}
    log_path = Path(log_file) if log_file is not None else metrics_file.with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # hydra would otherwise write its run folder under the caller's working directory
    hydra_dir = (log_path.parent / "hydra" / spec.experiment).resolve()
    command = [
        sys.executable,
        "-m",
        ENTRY_POINTS[spec.entry_point][0],
        *overrides(spec, workspace),
        f"hydra.run.dir={hydra_dir}",
        "hydra.output_subdir=null",
    ]
    seen = 0
    with open(log_path, "w") as log:
        # the separated trainers' configs find verl's by the relative searchpath file://verl/trainer/config
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=verl_parent_dir())
        while True:
            finished = process.poll() is not None
            records = read_metrics(metrics_file)
            for record in records[seen:]:
                if on_step is not None:
                    on_step(record)
            seen = len(records)
            if finished:
                break
            time.sleep(poll_s)
    if process.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"verl exited with code {process.returncode}; last lines of {log_path}:\n{tail}")
    return read_metrics(metrics_file)


def verl_parent_dir() -> str:
    """The folder holding the ``verl`` package (where verl's relative hydra searchpaths resolve)."""
    import verl

    return os.path.dirname(os.path.dirname(os.path.abspath(verl.__file__)))


def compose(spec: RunSpec, workspace: Workspace) -> Any:
    """verl's config of ``spec.entry_point`` with the harness overrides for ``spec`` (as that entry point builds it)."""
    import importlib

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ..sandbox import verl_config_dir

    module, config_name = ENTRY_POINTS[spec.entry_point]
    extra = []
    config_dir = verl_config_dir()
    if spec.entry_point != "main_ppo":  # its config folder sits beside the entry point and searches verl's
        config_dir = str(Path(importlib.util.find_spec(module).origin).parent / "config")
        extra = [f"hydra.searchpath=[file://{verl_config_dir()}]"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name=config_name, overrides=[*overrides(spec, workspace), *extra])


def bytecode_env(folder: str | Path) -> dict[str, str]:
    """Where the environment forbids writing compiled bytecode (``PYTHONDONTWRITEBYTECODE``), the environment that
    lets processes keep it in ``folder`` instead, away from the sources; empty where bytecode is written anyway.

    A run starts about nine Python processes (task runner, TransferQueue, workers, rollout, agent loop, reward),
    each importing torch, transformers and verl: without bytecode each compiles them from source, about 60 % of
    its start-up. Sharing ``folder`` between runs compiles them once.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return {}
    # an empty value counts as unset; Python checks the compiled file against its source before using it
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(Path(folder).resolve())}


@contextmanager
def local_ray(
    modules: Sequence[str] = (),
    num_cpus: int = RAY_CPUS,
    num_gpus: int = ONE_STEP_OFF_GPUS,
    *,
    bytecode_dir: str | Path | None = None,
) -> Iterator[None]:
    """A local Ray for in-process runs: the harness environment set first, so every worker inherits it.

    :param modules: more modules every verl process imports (e.g. a test's own components).
    :param bytecode_dir: where the cluster's processes keep compiled bytecode if the environment forbids writing
        it beside the sources (:func:`bytecode_env`); ``None``: as the environment says.
    """
    import ray

    os.environ.update(harness_env(modules))
    if bytecode_dir is not None:
        os.environ.update(bytecode_env(bytecode_dir))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def run_in_process(
    spec: RunSpec,
    workspace: Workspace,
    metrics_file: str | Path,
    *,
    loss_probe_dir: str | Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """What ``python -m verl.trainer.main_ppo`` does, on the Ray this process already started (:func:`local_ray`).

    verl's ``TaskRunnerV1`` (or, with ``spec.use_v1=False``, its legacy ``main_ppo_v0.TaskRunner``) runs the config, as ``main_ppo``'s ``run_ppo`` would start it; the run's own
    environment (metrics file, loss probe) is its Ray ``runtime_env``, which the actors it creates inherit.
    The task runner is killed when the run ends, with every actor it owns (workers, rollout server, verl's
    named reward and agent-loop workers): a failed run's exception keeps the runner's handle alive in its
    traceback, and its named actors would block the next run. Raises whatever verl raised.
    """
    import ray
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    if not ray.is_initialized():
        raise RuntimeError("run_in_process needs a running Ray; start one with cpu_loop.runner.local_ray()")
    metrics_file = Path(metrics_file)
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    metrics_file.unlink(missing_ok=True)
    wait_for_free_gpus(ONE_STEP_OFF_GPUS if spec.entry_point == "one_step_off" else RAY_GPUS)
    config = compose(spec, workspace)
    auto_set_device(config)
    if spec.entry_point == "one_step_off":  # what its main() does before run_ppo
        config.actor_rollout_ref.rollout.nnodes = config.rollout.nnodes
        config.actor_rollout_ref.rollout.n_gpus_per_node = config.rollout.n_gpus_per_node
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    env = {**run_env(metrics_file, loss_probe_dir, spec), **(extra_env or {})}
    runner_class = one_step_off_task_runner() if spec.entry_point == "one_step_off" else task_runner_class(spec.use_v1)
    task_runner = runner_class.options(runtime_env={"env_vars": env}).remote()
    try:
        ray.get(task_runner.run.remote(config))
    finally:
        ray.kill(task_runner)
        release_placement_groups()
        wait_for_named_actors_to_exit()
    return read_metrics(metrics_file)


def task_runner_class(use_v1: bool) -> Any:
    """The task runner ``main_ppo`` starts: ``TaskRunnerV1``, or ``main_ppo_v0.TaskRunner`` for the legacy line."""
    if use_v1:
        from verl.trainer.main_ppo import TaskRunnerV1

        return TaskRunnerV1
    from verl.trainer.main_ppo_v0 import TaskRunner

    return TaskRunner


def one_step_off_task_runner() -> Any:
    """verl's one-step-off task runner (``python -m verl.experimental.one_step_off_policy.main_ppo`` starts it)."""
    from verl.experimental.one_step_off_policy.main_ppo import OneStepTaskRunner

    return OneStepTaskRunner


def wait_for_named_actors_to_exit(timeout_s: float = 60.0) -> None:
    """Block until a finished run's named actors are gone (their names would be taken for the next run)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while names := [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"verl's named actors {names} still exist {timeout_s:.0f} s after their run ended")
        time.sleep(0.2)


def release_placement_groups() -> None:
    """Remove the placement groups a finished run left behind.

    verl's task runner reserves its workers' logical GPUs in placement groups, which outlive the
    task runner actor and are only reclaimed when the driver exits (as after ``main_ppo``). An
    in-process run ends without the driver exiting, so it releases them here.
    """
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group

    for pg_id, info in placement_group_table().items():
        if info.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id))))


def wait_for_free_gpus(gpus: int = RAY_GPUS, timeout_s: float = 120.0) -> None:
    """Block until the previous run's placement groups have released Ray's logical GPUs.

    verl's actors of a finished run die asynchronously after its task runner returns; a run
    started before then finds no free GPU and fails in its resource-pool check.
    """
    import ray

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("GPU", 0) < gpus:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"Ray still has {ray.available_resources().get('GPU', 0)} of {gpus} logical GPU(s) free "
                f"{timeout_s:.0f} s after the previous run; its actors did not exit"
            )
        time.sleep(0.5)
