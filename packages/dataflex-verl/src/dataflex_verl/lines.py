"""Which verl trainer line runs DataFlex: ``dataflex.trainer_line`` against ``trainer.use_v1``.

verl 0.9 has two trainer lines. ``trainer.use_v1=true`` (verl's default) runs
the V1 trainers of ``trainer.v1.trainer_mode``, on TransferQueue; DataFlex
runs there as the ``dataflex_*`` trainer modes (:mod:`dataflex_verl.trainers`).
``trainer.use_v1=false`` runs ``RayPPOTrainer`` (``main_ppo_v0``) on
``DataProto``; DataFlex runs there at its ``compute_advantage``
(:mod:`dataflex_verl.legacy`). verl's separated trainers are
``RayPPOTrainer`` subclasses with entry points of their own, whose configs
carry a top-level ``rollout:`` block (the rollout's own resources): one-step-off
is the legacy line whatever ``trainer.use_v1`` says
(:mod:`dataflex_verl.one_step_off`); fully-async (its config also has
``async_training:``) is refused. ``dataflex.trainer_line`` says which line the
user means (``auto``: whichever ``trainer.use_v1`` selects); a config whose
settings would have no effect on the line verl runs is refused here, when verl
validates it, before Ray starts.

Importing this module does not import verl.
"""

from __future__ import annotations

from typing import Any

from . import TRAINER_MODES

#: ``dataflex.trainer_line`` values; ``auto`` follows ``trainer.use_v1``.
TRAINER_LINES = ("auto", "v1", "legacy")
#: The block key, read by the host (not by core).
LINE_KEY = "trainer_line"
#: Why DataFlex refuses verl's fully-async trainer (``verl/experimental/fully_async_policy``).
FULLY_ASYNC_REASON = (
    "its trainer takes rollouts from a message queue that the Rollouter fills while weights change (a sample's "
    "generation may span several weight versions), and the project's CPU harness cannot drive it yet (its first "
    "weight sync comes after async_training.trigger_parameter_sync_step steps), so DataFlex on it is untested"
)


def _get(node: Any, *path: str, default: Any = None) -> Any:
    for part in path:
        try:
            node = node.get(part, None) if node is not None else None
        except Exception:  # noqa: BLE001 - not a config this check can read
            return default
    return default if node is None else node


def asks_for_dataflex(config: Any) -> bool:
    """Whether ``config`` has a ``dataflex:`` block or selects a DataFlex trainer mode."""
    return _get(config, "dataflex") is not None or _get(config, "trainer", "v1", "trainer_mode") in TRAINER_MODES


def separated_trainer(config: Any) -> str | None:
    """``"fully_async"`` or ``"one_step_off"`` for a config of verl's separated trainers; ``None`` otherwise.

    Both separated configs declare a top-level ``rollout:`` block (the rollout replicas' nodes and GPUs), which
    verl's ``ppo_trainer`` config has not; the fully-async one also ``async_training:``, which its entry point
    requires.
    """
    if _get(config, "async_training") is not None:
        return "fully_async"
    if _get(config, "rollout") is not None:
        return "one_step_off"
    return None


def trainer_line(config: Any) -> str | None:
    """``"v1"`` or ``"legacy"``: where DataFlex runs under ``config``; ``None`` when it asks for no DataFlex.

    :raises ConfigError: an unknown ``dataflex.trainer_line``, a line that ``trainer.use_v1`` (or the
        separated entry point) does not run, a ``dataflex_*`` trainer mode on the legacy line (which never
        reads ``trainer.v1.trainer_mode``), or verl's fully-async trainer.
    """
    if not asks_for_dataflex(config):
        return None
    from dataflex_core import ConfigError

    wanted = str(_get(config, "dataflex", LINE_KEY, default="auto"))
    if wanted not in TRAINER_LINES:
        raise ConfigError(f"dataflex.{LINE_KEY}={wanted!r} is not one of {', '.join(TRAINER_LINES)}")
    separated = separated_trainer(config)
    if separated == "fully_async":
        raise ConfigError(
            f"verl's fully-async trainer (verl.experimental.fully_async_policy) does not run DataFlex: "
            f"{FULLY_ASYNC_REASON}. Run verl's one-step-off trainer (python -m "
            "verl.experimental.one_step_off_policy.main_ppo), RayPPOTrainer (python -m verl.trainer.main_ppo "
            "trainer.use_v1=false) or trainer.v1.trainer_mode=dataflex_separate_async, or remove the dataflex: block"
        )
    if separated == "one_step_off":
        if wanted == "v1":
            raise ConfigError(
                f"dataflex.{LINE_KEY}='v1', but verl's one-step-off trainer (OneStepOffRayTrainer) is a RayPPOTrainer "
                f"subclass, which runs DataFlex on the legacy line whatever trainer.use_v1 says; set "
                f"dataflex.{LINE_KEY}=legacy or auto, or run python -m verl.trainer.main_ppo for the V1 trainers"
            )
        use_v1, line = False, "legacy"  # its entry point never reads trainer.use_v1
    else:
        use_v1 = bool(_get(config, "trainer", "use_v1", default=True))
        line = "v1" if use_v1 else "legacy"
    if wanted not in ("auto", line):
        fix = "trainer.use_v1=false" if wanted == "legacy" else "trainer.use_v1=true"
        raise ConfigError(
            f"dataflex.{LINE_KEY}={wanted!r}, but trainer.use_v1={str(use_v1).lower()} runs verl's {line} trainer "
            f"line; set {fix}, or dataflex.{LINE_KEY}=auto to follow trainer.use_v1"
        )
    mode = _get(config, "trainer", "v1", "trainer_mode")
    if line == "legacy" and mode in TRAINER_MODES:
        runs = "verl's one-step-off trainer" if separated else "trainer.use_v1=false runs verl's legacy trainer"
        v1 = "run python -m verl.trainer.main_ppo" if separated else "set trainer.use_v1=true"
        raise ConfigError(
            f"{runs} (RayPPOTrainer), which never reads "
            f"trainer.v1.trainer_mode (here {mode!r}): that DataFlex trainer would not be built. On the legacy line "
            "DataFlex runs at compute_advantage from the dataflex: block alone; leave trainer.v1.trainer_mode at "
            f"verl's default, or {v1} to run the V1 trainer mode"
        )
    return line
