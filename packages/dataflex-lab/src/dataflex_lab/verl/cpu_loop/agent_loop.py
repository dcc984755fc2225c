"""verl's single-turn agent loop, with a stable key per sample so generation is reproducible.

Two runs with the same seed must sample the same responses for the equality
tests (``sync`` against ``dataflex_sync`` with uniform weights), but the
requests reach the rollout server in whatever order the asyncio tasks run.
This loop names each request by ``(step, dataset index, sample index)`` and
hands that key to the server (:mod:`dataflex_lab.verl.cpu_loop.rollout`), which
seeds the sample's generator with it. The runner declares it in an agent-loop
config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, a
public verl option) and selects it with ``...agent.default_agent_loop``.
"""

from __future__ import annotations

import contextvars
from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from dataflex_verl.legacy_rounds import ROLLOUT_OFFSET

from .names import AGENT_LOOP_NAME

#: The trajectory info (``step``, ``sample_index``, ``rollout_n``) of the sample being generated, set by
#: :class:`~dataflex_lab.verl.cpu_loop.legacy_agent_loop.TrajectoryAgentLoopWorker` on verl's legacy line,
#: whose agent-loop worker passes only the batch's ``non_tensor_batch`` columns as ``run`` kwargs.
TRAJECTORY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("trajectory", default=None)


def sample_key(kwargs: dict[str, Any]) -> str:
    """``"<step>:<dataset index>:<sample index>"`` from the fields verl passes an agent loop's ``run``.

    On verl's legacy line the step and sample index come from the trajectory info verl computed
    (:data:`TRAJECTORY`): the samples of a prompt are consecutive there, numbered by ``rollout_n`` within one
    generate call; a later stage of the same prompt in the step (``mechanism: pilot``) numbers its samples on
    from the ones its group has (the row's ``ROLLOUT_OFFSET`` column), so they are new samples, not repeats.
    """
    trajectory = TRAJECTORY.get()
    if "global_steps" not in kwargs and trajectory is not None:
        sample = int(trajectory["rollout_n"]) + int(kwargs.get(ROLLOUT_OFFSET, 0))
        return f"{int(trajectory['step'])}:{int(trajectory['sample_index'])}:{sample}"
    missing = [name for name in ("global_steps", "index", "session_id") if name not in kwargs]
    if missing:
        raise KeyError(
            f"{AGENT_LOOP_NAME} needs {missing} among the agent loop's inputs to key deterministic sampling; "
            f"got {sorted(kwargs)} (does the dataset carry extra_info.index?)"
        )
    return f"{int(kwargs['global_steps'])}:{int(kwargs['index'])}:{int(kwargs['session_id'])}"


class _KeyedClient:
    """Passes every call to verl's LLM client, adding ``sample_key`` to ``generate``."""

    def __init__(self, client: Any, key: str) -> None:
        self._client = client
        self._key = key

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        return await self._client.generate(*args, sample_key=self._key, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class KeyedSingleTurnAgentLoop(SingleTurnAgentLoop):
    """:class:`SingleTurnAgentLoop` whose generation requests carry the sample's stable key."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        client = self.server_manager
        self.server_manager = _KeyedClient(client, sample_key(kwargs))
        try:
            return await super().run(sampling_params, **kwargs)
        finally:
            self.server_manager = client
