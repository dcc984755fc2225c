"""Every place the CPU harness reaches into verl's private parts, in one module.

Checked against verl 0.9.1 (:data:`CHECKED_VERL`). The rest of the harness
uses verl's public seams (``PlatformRegistry.register``,
``RolloutReplicaRegistry.register``, the agent-loop ``register`` decorator,
``VERL_USE_EXTERNAL_MODULES``, ``VERL_ENGINE_DEVICE``). What is private:

- ``verl.workers.rollout.base._ROLLOUT_REGISTRY``, a module dict with no
  register function, maps ``(rollout name, "async")`` to the adapter class
  that the trainer's worker builds;
- ``verl.utils.distributed.initialize_global_process_group_ray`` builds the
  backend string ``"cpu:gloo,<device>:<backend>"``, which torch refuses on a
  CPU platform (``Duplicate device type cpu``); the harness makes plain
  ``gloo`` its default;
- for the end-to-end tests only, ``verl.workers.utils.losses.ppo_loss`` is
  wrapped to record the ``rollout_is_weights`` the actor's loss receives
  (:data:`LOSS_PROBE_ENV`);
- on a run without DataFlex (the demo's baseline arm), verl's
  ``metric_utils.compute_data_metrics``, which every trainer line calls on the
  step's batch by a name it imported, is wrapped to add the
  ``dataflex/compute/*`` counters DataFlex's trainers log
  (:data:`COMPUTE_COUNTERS_ENV`), so every arm can be compared at equal compute;
- V1's ``ReplayBuffer`` (``verl.trainer.ppo.v1.replay_buffer``) polls TransferQueue every ``poll_interval``
  seconds (2.0 by default; ``trainer_base._build_replay_buffer`` passes none) until a step's or a validation
  batch's groups have finished. The tiny model generates them in a fraction of that, so each V1 step's
  generation and each validation batch waited for the next whole 2 s. The harness makes
  :data:`REPLAY_POLL_S` the default (:func:`poll_replay_buffer_quickly`). A sync step (and a validation) waits
  for all of its groups either way, and generation is keyed by step, prompt and sample, so only when the
  trainer sees them changes, not what it trains on; an async step already took whichever groups had finished.

:func:`problems` lists what no longer holds in the installed verl; a test runs
it, so a verl release that moves any of these fails loudly there.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
from pathlib import Path
from typing import Any

#: The verl range these internals were checked against.
CHECKED_VERL = ">=0.9.1,<0.10"
#: Set to a folder to record, in every actor process, what each ``ppo_loss`` call received.
LOSS_PROBE_ENV = "DATAFLEX_CPU_LOSS_PROBE_DIR"
#: Set (to ``1``) on a run without DataFlex to log the ``dataflex/compute/*`` counters from verl's own batch.
COMPUTE_COUNTERS_ENV = "DATAFLEX_CPU_COMPUTE_COUNTERS"
#: The modules that call ``compute_data_metrics`` by the name they imported: V1's trainers, the legacy line's,
#: and the separated trainers' (one-step-off).
DATA_METRICS_CALLERS = (
    "verl.trainer.ppo.v1.trainer_base",
    "verl.trainer.ppo.ray_trainer",
    "verl.experimental.separation.ray_trainer",
)

ADAPTER_CLASS = "dataflex_lab.verl.cpu_loop.rollout.CpuServerAdapter"
#: The module of V1's replay buffer; only the task runner imports it (the harness patches it when it does).
REPLAY_BUFFER_MODULE = "verl.trainer.ppo.v1.replay_buffer"
#: Seconds between the replay buffer's polls on the harness (verl's default is 2.0 s). A poll reads every tag
#: of TransferQueue (a Ray call to its controller), so it is not free on 2 cores; 20 a second lose at most
#: 50 ms a wait.
REPLAY_POLL_S = 0.05


def register_rollout_adapter(rollout_name: str) -> None:
    """Map ``(rollout_name, "async")`` to :class:`~dataflex_lab.verl.cpu_loop.rollout.CpuServerAdapter`."""
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[(rollout_name, "async")] = ADAPTER_CLASS


def use_plain_gloo_process_group() -> None:
    """Make ``backend="gloo"`` the default of verl's ``initialize_global_process_group_ray``."""
    import sys

    from verl.utils import distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_dataflex_gloo", False):
        return

    @functools.wraps(original)
    def initialize(timeout_second: Any = None, backend: Any = None) -> Any:
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize._dataflex_gloo = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = initialize
    # modules that imported the name before this ran keep the old binding; rebind it there too
    for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "initialize_global_process_group_ray", None) is original:
            module.initialize_global_process_group_ray = initialize


def poll_replay_buffer_quickly(module: Any, interval: float = REPLAY_POLL_S) -> None:
    """Make ``interval`` the default ``poll_interval`` of ``module.ReplayBuffer`` (its async subclass inherits it).

    A value the caller passes still wins. ``module`` is :data:`REPLAY_BUFFER_MODULE`, given once it has been
    imported (:func:`dataflex_verl.after_import.when_imported`), so no other process imports it.
    """
    buffer = module.ReplayBuffer
    original = buffer.__init__
    if getattr(original, "_dataflex_poll", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if "poll_interval" not in signature.bind(self, *args, **kwargs).arguments:
            kwargs["poll_interval"] = interval
        original(self, *args, **kwargs)

    init._dataflex_poll = True  # type: ignore[attr-defined]
    buffer.__init__ = init


def install_loss_probe(folder: str) -> None:
    """Wrap ``ppo_loss`` so each call saves the weights, mask and aggregation it received under ``folder``.

    Each record also carries the rank that made the call and the counts verl's ``agg_loss`` divides by
    (``dp_size``, ``batch_num_tokens``, ``global_batch_size``), so a test with several actor workers can
    check which batch a loss normalised over.

    Must run before ``verl.workers.engine_workers`` imports ``ppo_loss`` (the
    harness plugin is imported from inside ``import verl``, which is early enough).
    """
    import torch
    from verl.workers.utils import losses

    original = losses.ppo_loss
    if getattr(original, "_dataflex_probe", False):
        return
    counter = itertools.count()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)

    @functools.wraps(original)
    def probed(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> Any:
        fields = ["response_mask", "advantages"] + (["rollout_is_weights"] if "rollout_is_weights" in data else [])
        padded = data.select(*fields).to_padded_tensor()
        record = {name: padded[name].detach().cpu().clone() for name in fields}
        record["loss_agg_mode"] = config.loss_agg_mode
        record["pid"] = os.getpid()
        record["rank"] = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        for name in ("dp_size", "batch_num_tokens", "global_batch_size"):
            value = data[name] if name in data else None
            record[name] = None if value is None else int(value)
        torch.save(record, out / f"loss_{os.getpid()}_{next(counter):05d}.pt")
        return original(config, model_output, data, dp_group)

    probed._dataflex_probe = True  # type: ignore[attr-defined]
    losses.ppo_loss = probed


def install_compute_counters() -> None:
    """Wrap verl's ``compute_data_metrics`` so each step's metrics carry the ``dataflex/compute/*`` counters.

    The counters are :func:`dataflex_core.compute.compute_counters` of the batch verl computes its data metrics
    on (V1 drops its padding rows first): the same function DataFlex's trainers count with, so a plain arm's
    rollouts, tokens and wasted (zero-advantage) rows mean what a DataFlex arm's do. The totals live in the
    trainer's process, one run per process; a resumed run would restart them. Only for runs without DataFlex:
    a DataFlex trainer logs its own counters earlier in the step, which these would overwrite.
    """
    import sys

    from verl.trainer.ppo import metric_utils

    from dataflex_core.compute import ComputeTotals, compute_counters

    original = metric_utils.compute_data_metrics
    if getattr(original, "_dataflex_counters", False):
        return
    totals = ComputeTotals()

    @functools.wraps(original)
    def counted(batch: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(batch, *args, **kwargs)
        data = batch.batch
        out.update(compute_counters(data["response_mask"], data["advantages"], totals=totals))
        return out

    counted._dataflex_counters = True  # type: ignore[attr-defined]
    metric_utils.compute_data_metrics = counted
    for name in DATA_METRICS_CALLERS:  # a caller imported before this ran keeps the old binding
        module = sys.modules.get(name)
        if module is not None and getattr(module, "compute_data_metrics", None) is original:
            module.compute_data_metrics = counted


def problems() -> list[str]:
    """What this module relies on that the installed verl no longer provides (empty when all holds)."""
    found: list[str] = []
    try:
        from verl.workers.rollout import base

        registry = getattr(base, "_ROLLOUT_REGISTRY", None)
        if not isinstance(registry, dict) or ("vllm", "async") not in registry:
            found.append("verl.workers.rollout.base._ROLLOUT_REGISTRY is no longer a dict keyed by (name, mode)")
        if "_ROLLOUT_REGISTRY" not in inspect.getsource(base.get_rollout_class):
            found.append("verl.workers.rollout.base.get_rollout_class no longer reads _ROLLOUT_REGISTRY")
    except Exception as exc:  # noqa: BLE001 - report, do not crash the check
        found.append(f"verl.workers.rollout.base: {exc!r}")
    try:
        from verl.utils import distributed

        params = inspect.signature(distributed.initialize_global_process_group_ray).parameters
        if "backend" not in params or "timeout_second" not in params:
            found.append("initialize_global_process_group_ray(timeout_second, backend) changed its signature")
        from verl.workers import engine_workers

        if "initialize_global_process_group_ray" not in inspect.getsource(engine_workers):
            found.append(
                "verl.workers.engine_workers no longer builds its process group with initialize_global_process_group_ray"
            )
        if "ppo_loss" not in vars(engine_workers):
            found.append(
                "verl.workers.engine_workers no longer imports ppo_loss by name (the loss probe would miss it)"
            )
    except Exception as exc:  # noqa: BLE001
        found.append(f"verl.utils.distributed / verl.workers.engine_workers: {exc!r}")
    try:
        from verl.workers.utils import losses

        if list(inspect.signature(losses.ppo_loss).parameters)[:3] != ["config", "model_output", "data"]:
            found.append("verl.workers.utils.losses.ppo_loss(config, model_output, data, ...) changed its signature")
    except Exception as exc:  # noqa: BLE001
        found.append(f"verl.workers.utils.losses: {exc!r}")
    try:
        import importlib

        from verl.trainer.ppo import metric_utils

        if list(inspect.signature(metric_utils.compute_data_metrics).parameters)[:1] != ["batch"]:
            found.append("verl.trainer.ppo.metric_utils.compute_data_metrics(batch, ...) changed its signature")
        for name in DATA_METRICS_CALLERS:
            if "compute_data_metrics" not in vars(importlib.import_module(name)):
                found.append(f"{name} no longer imports compute_data_metrics by name (the plain arms' counters)")
    except Exception as exc:  # noqa: BLE001
        found.append(f"verl.trainer.ppo.metric_utils: {exc!r}")
    found.extend(_replay_buffer_problems())
    return found


def _replay_buffer_problems() -> list[str]:
    """What :func:`poll_replay_buffer_quickly` relies on that the installed verl no longer provides."""
    found: list[str] = []
    try:
        import importlib

        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        module = importlib.import_module(REPLAY_BUFFER_MODULE)
        if "poll_interval" not in inspect.signature(module.ReplayBuffer.__init__).parameters:
            found.append(f"{REPLAY_BUFFER_MODULE}.ReplayBuffer.__init__ no longer takes poll_interval")
        if "self.poll_interval" not in inspect.getsource(module.ReplayBuffer._wait_for_next_poll):
            found.append(f"{REPLAY_BUFFER_MODULE}.ReplayBuffer._wait_for_next_poll no longer waits poll_interval")
        if not issubclass(module.ReplayBufferAsync, module.ReplayBuffer) or "__init__" in vars(
            module.ReplayBufferAsync
        ):
            found.append(f"{REPLAY_BUFFER_MODULE}.ReplayBufferAsync no longer inherits ReplayBuffer.__init__")
        if "poll_interval" in inspect.getsource(PPOTrainer._build_replay_buffer):
            found.append(
                "verl's PPOTrainer._build_replay_buffer now passes poll_interval (from its config?): set the "
                "harness's REPLAY_POLL_S through that instead of the ReplayBuffer default"
            )
    except Exception as exc:  # noqa: BLE001
        found.append(f"{REPLAY_BUFFER_MODULE}: {exc!r}")
    return found
