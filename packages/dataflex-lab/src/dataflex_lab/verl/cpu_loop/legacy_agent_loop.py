"""verl's agent-loop manager for the legacy trainer line, with the trajectory info visible to the agent loop.

verl's legacy ``RayPPOTrainer`` rolls out through the plain
``AgentLoopManager``, whose worker passes only the batch's
``non_tensor_batch`` columns to an agent loop's ``run`` (no ``global_steps``, no
sample index: verl 0.9.1 ``experimental/agent_loop/agent_loop.py:645``) but
hands ``_run_agent_loop`` the trajectory info it computed (step, dataset index,
``rollout_n``). This worker makes that info the agent loop's
:data:`~dataflex_lab.verl.cpu_loop.agent_loop.TRAJECTORY`, so the keyed agent
loop samples the same responses in two runs. The runner selects the manager with
verl's public ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker

from .agent_loop import TRAJECTORY


class TrajectoryAgentLoopWorker(AgentLoopWorker):
    """verl's agent-loop worker; each sample's agent loop runs with its trajectory info in :data:`TRAJECTORY`."""

    async def _run_agent_loop(self, sampling_params: dict[str, Any], trajectory: dict[str, Any], **kwargs: Any):
        token = TRAJECTORY.set(trajectory)
        try:
            return await super()._run_agent_loop(sampling_params, trajectory, **kwargs)
        finally:
            TRAJECTORY.reset(token)


class TrajectoryAgentLoopManager(AgentLoopManager):
    """verl's ``AgentLoopManager`` with :class:`TrajectoryAgentLoopWorker` workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.agent_loop_workers_class = ray.remote(TrajectoryAgentLoopWorker)
        super().__init__(*args, **kwargs)
