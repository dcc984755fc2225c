"""Names the harness registers with verl, in a module that imports nothing.

verl imports :mod:`dataflex_lab.verl.cpu_loop.plugin` from inside ``import verl``;
when a process's first import is one of the harness's own modules (a Ray actor
of :mod:`~dataflex_lab.verl.cpu_loop.rollout`), that module is only half-built at
that moment, so the plugin takes the names from here.
"""

#: ``actor_rollout_ref.rollout.name`` that selects the CPU rollout backend.
ROLLOUT_NAME = "dataflex_cpu"
#: ``actor_rollout_ref.rollout.agent.default_agent_loop`` of the keyed single-turn loop.
AGENT_LOOP_NAME = "dataflex_cpu_single_turn"
#: ``actor_rollout_ref.rollout.checkpoint_engine.backend`` of the CPU weight sync (:mod:`.weight_sync`).
WEIGHT_SYNC_BACKEND = "dataflex_cpu"
#: ``VERL_PLATFORM`` of the CPU platform.
PLATFORM_NAME = "cpu"


def server_actor_name(replica_rank: int, node_rank: int = 0) -> str:
    """The Ray actor name of a replica's server (the adapter finds it by this name)."""
    return f"{ROLLOUT_NAME}_server_{replica_rank}_{node_rank}"
