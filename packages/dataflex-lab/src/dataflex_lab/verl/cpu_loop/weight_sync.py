"""A weight-sync backend for verl's separated trainers (one-step-off) on the CPU.

With the rollout on replicas of its own (``hybrid_engine=false``), verl
syncs weights through a checkpoint engine. The ones verl 0.9.1 ships need a
GPU transport (nccl, nixl, hccl: cupy, vllm, torch_npu) or colocated replicas
(``naive``). This backend hands the actor's full CPU state dict to the rollout
workers through a named Ray actor (:class:`WeightMailbox`): the actor's rank 0
puts the n-th sync's tensors, each rollout worker takes the n-th. It is
registered under :data:`~.names.WEIGHT_SYNC_BACKEND` with verl's public
``CheckpointEngineRegistry``; the runner selects it with
``actor_rollout_ref.rollout.checkpoint_engine.backend`` and
``...checkpoint_engine.custom_backend_module`` (this module), which verl
imports in the trainer, the actor workers and the rollout workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from .names import WEIGHT_SYNC_BACKEND as BACKEND

#: The Ray actor name of the mailbox (one per run: it dies with the worker that created it).
MAILBOX_NAME = "dataflex_cpu_weight_mailbox"


class WeightMailbox:
    """Holds the latest sync's state dict; ``take(n)`` waits until the n-th sync has been put."""

    def __init__(self) -> None:
        self.count = 0
        self.state: dict[str, torch.Tensor] = {}
        self.changed = asyncio.Condition()

    async def put(self, count: int, state: dict[str, torch.Tensor]) -> None:
        async with self.changed:
            self.count, self.state = count, state
            self.changed.notify_all()

    async def take(self, count: int) -> dict[str, torch.Tensor]:
        async with self.changed:
            await self.changed.wait_for(lambda: self.count >= count)
            if self.count != count:
                raise RuntimeError(f"rollout worker asked for weight sync {count}, but sync {self.count} is the latest")
            return self.state


def mailbox() -> Any:
    """The run's mailbox actor (created by whichever side asks first)."""
    return (
        ray.remote(WeightMailbox)
        .options(name=MAILBOX_NAME, get_if_exists=True, num_cpus=0, max_concurrency=16)
        .remote()
    )


@CheckpointEngineRegistry.register(BACKEND)
class CpuMailboxCheckpointEngine(CheckpointEngine):
    """verl's checkpoint-engine interface over :class:`WeightMailbox`; no process group to build."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, **_: Any) -> None:
        self.is_master = is_master
        self.syncs = 0
        # held for the engine's life: a named actor whose handles are all gone is collected, even mid-run
        self.mailbox = mailbox()

    def prepare(self) -> dict[str, Any]:
        return {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        return {}, {}

    def init_process_group(self, **kwargs: Any) -> None:
        return None

    def finalize(self) -> None:
        return None

    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None):
        """Every actor rank walks the weights (an FSDP2 shard's ``full_tensor`` is a collective); rank 0 puts them."""
        self.syncs += 1
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            if self.is_master:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_master:
            await self.mailbox.put.remote(self.syncs, state)
        return {}

    async def receive_weights(self, global_steps: int | None = None) -> AsyncIterator[tuple[str, torch.Tensor]]:
        self.syncs += 1
        state = await self.mailbox.take.remote(self.syncs)
        for name, tensor in state.items():
            yield name, tensor
