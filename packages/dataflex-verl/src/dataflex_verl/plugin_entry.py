"""The ``verl.plugins`` entry point: register the DataFlex trainers whenever verl is imported.

verl imports this module from inside ``verl/__init__.py``, in the driver and in
every Ray actor. Importing verl's v1 trainer package right there would add
seconds to every worker's start and run half-way through verl's own
``__init__``; so the trainers are registered the moment
``verl.trainer.ppo.v1`` finishes importing (a post-import hook, :mod:`.after_import`). That is
exactly when ``get_trainer_cls`` can first be called.

verl's config validator (``verl.utils.config.validate_config``, which
``main_ppo`` calls before it picks a trainer line, and the legacy task runner
calls again) is wrapped to refuse a config whose DataFlex settings the line
verl runs would ignore (:func:`check_trainer_line`). With
``trainer.use_v1=false`` the legacy ``RayPPOTrainer`` runs DataFlex at its
``compute_advantage`` (:mod:`dataflex_verl.legacy`, installed when
``verl.trainer.ppo.ray_trainer`` is imported). verl's one-step-off trainer
becomes the DataFlex one (:mod:`dataflex_verl.one_step_off`) when its module is
imported; ``run_ppo``, which every entry point calls, is wrapped to run the
same line check in the driver before Ray starts (verl's fully-async entry
point never calls ``validate_config``).

verl logs a failing plugin only at DEBUG level, so every failure here is
logged at WARNING and printed to stderr, and a trainer that could not be
registered is replaced by a stand-in that raises the original error when
the user's configuration selects it.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import traceback
from typing import Any

from . import TRAINER_MODES
from .after_import import when_imported
from .version import __version__

logger = logging.getLogger("dataflex_verl")

#: The module whose import completes the trainer registry (``register_trainer``/``get_trainer_cls``).
TRAINER_PACKAGE = "verl.trainer.ppo.v1"
#: The module holding ``validate_config``, which verl's ``main_ppo`` calls on every config before choosing a trainer.
CONFIG_MODULE = "verl.utils.config"
#: verl versions this release is built and tested against.
SUPPORTED_VERL = ">=0.9,<0.10"

#: The error that stopped registration in this process, if any.
registration_error: BaseException | None = None


def _report(message: str) -> None:
    """Say it where the user will see it: a WARNING log record and stderr."""
    logger.warning(message)
    print(f"[dataflex-verl] WARNING: {message}", file=sys.stderr, flush=True)


def _check_verl_version() -> None:
    try:
        import verl
        from packaging.version import Version

        version = Version(verl.__version__)
    except Exception:  # noqa: BLE001 - a missing version string is not worth failing over
        return
    if not (Version("0.9") <= version < Version("0.10")):
        _report(
            f"dataflex-verl {__version__} supports verl {SUPPORTED_VERL}, but verl {version} is installed; "
            "the trainers may not see the fields they expect. Install a supported verl or a matching dataflex-verl."
        )


def _register_stand_ins(error: BaseException) -> None:
    """Register trainers that raise ``error`` when constructed, so the cause reaches the user."""
    try:
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, PPOTrainer
    except Exception:  # noqa: BLE001 - nothing to register into
        return
    detail = f"{type(error).__name__}: {error}"

    for mode in TRAINER_MODES:
        if mode in TRAINER_REGISTRY:
            continue

        def __new__(cls: Any, *args: Any, _mode: str = mode, **kwargs: Any) -> Any:
            # raised in __new__: PPOTrainer is abstract, so __init__ would never be reached
            raise RuntimeError(
                f"trainer.v1.trainer_mode={_mode!r} is provided by dataflex-verl {__version__}, which failed to "
                f"register its trainers in this process: {detail}. Fix that error (see the traceback logged "
                "by dataflex_verl above) or select a plain verl trainer mode."
            ) from error

        TRAINER_REGISTRY[mode] = type(f"DataFlexUnavailable_{mode}", (PPOTrainer,), {"__new__": __new__})


def register_trainers() -> None:
    """Import :mod:`dataflex_verl.trainers`, which registers the three trainers with verl.

    Safe to call more than once. Failures are reported loudly and recorded in
    :data:`registration_error` instead of breaking verl's own import.
    """
    global registration_error
    try:
        _check_verl_version()
        from . import trainers  # noqa: F401 - importing registers the trainers
    except Exception as exc:  # noqa: BLE001 - must not break verl for users of its own trainers
        registration_error = exc
        _report(
            f"dataflex-verl {__version__} could not register its trainers "
            f"({', '.join(TRAINER_MODES)}): {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        )
        _register_stand_ins(exc)


def check_trainer_line(config: Any) -> None:
    """Raise when ``config`` asks for DataFlex in a way the trainer line verl runs would ignore (:mod:`.lines`)."""
    from .lines import trainer_line

    trainer_line(config)


def _check_first(module: Any, name: str) -> None:
    """Wrap ``module.<name>(config, ...)`` so that it first runs :func:`check_trainer_line` (once per module)."""
    original = getattr(module, name)
    if getattr(original, "dataflex_guarded", False):
        return

    @functools.wraps(original)
    def guarded(config: Any, *args: Any, **kwargs: Any) -> Any:
        check_trainer_line(config)
        return original(config, *args, **kwargs)

    guarded.dataflex_guarded = True  # type: ignore[attr-defined]
    setattr(module, name, guarded)


def guard_validate_config(module: Any) -> None:
    """Check the trainer line in ``module.validate_config``, which verl's main entry points call before Ray."""
    _check_first(module, "validate_config")


def _guard_config_module(module: Any) -> None:
    try:
        guard_validate_config(module)
    except Exception as exc:  # noqa: BLE001 - must not break verl for users of its own trainers
        _report(f"dataflex-verl {__version__} could not guard verl's validate_config (dataflex.trainer_line): {exc!r}")


def _install_seam(module: Any) -> None:
    try:
        from .legacy import install_seam, refuse_in_separated_trainers

        install_seam(module)
        if hasattr(module, "SeparateRayPPOTrainer"):
            refuse_in_separated_trainers(module)
    except Exception as exc:  # noqa: BLE001 - must not break verl for users of its own trainers
        _report(
            f"dataflex-verl {__version__} could not wrap {module.__name__}.compute_advantage; DataFlex cannot run "
            f"on verl's legacy trainer line (trainer.use_v1=false): {exc!r}\n{traceback.format_exc()}"
        )


def guard_run_ppo(module: Any) -> None:
    """Check the trainer line in ``module.run_ppo``: the separated entry points skip validate_config (before Ray)."""
    _check_first(module, "run_ppo")


def _guard_entry_module(module: Any) -> None:
    try:
        guard_run_ppo(module)
    except Exception as exc:  # noqa: BLE001 - must not break verl for users of its own trainers
        _report(f"dataflex-verl {__version__} could not guard verl's run_ppo (dataflex.trainer_line): {exc!r}")


def _install_one_step_off_trainer(module: Any) -> None:
    try:
        # importing it rebinds module.OneStepOffRayTrainer; when that import is what imported verl's module,
        # it is still under way here and rebinds when it finishes
        importlib.import_module(f"{__package__}.one_step_off")
    except Exception as exc:  # noqa: BLE001
        _report(
            f"dataflex-verl {__version__} could not install its one-step-off trainer into {module.__name__}; "
            f"verl's one-step-off trainer would ignore a dataflex: block: {exc!r}\n{traceback.format_exc()}"
        )


def _install_legacy_trainer(module: Any) -> None:
    try:
        from .legacy_trainers import install_trainer

        install_trainer(module)
    except Exception as exc:  # noqa: BLE001
        _report(
            f"dataflex-verl {__version__} could not install its legacy-line trainer into {module.__name__}; "
            f"DataFlex cannot run with trainer.use_v1=false: {exc!r}\n{traceback.format_exc()}"
        )


#: The legacy task runner's module: its ``RayPPOTrainer`` global becomes the DataFlex trainer.
LEGACY_TASK_RUNNER = "verl.trainer.main_ppo_v0"
#: module name -> what to run once it has been imported.
AFTER_IMPORT = {
    TRAINER_PACKAGE: lambda module: register_trainers(),
    CONFIG_MODULE: _guard_config_module,
    "verl.trainer.ppo.ray_trainer": _install_seam,
    "verl.experimental.separation.ray_trainer": _install_seam,
    LEGACY_TASK_RUNNER: _install_legacy_trainer,
    "verl.experimental.one_step_off_policy.ray_trainer": _install_one_step_off_trainer,
    "verl.trainer.main_ppo": _guard_entry_module,
}


def install() -> None:
    """Run each :data:`AFTER_IMPORT` action now if its module is loaded, else when it gets imported."""
    for name, action in AFTER_IMPORT.items():
        when_imported(name, action)


try:
    install()
except Exception as _exc:  # pragma: no cover - installing a finder does not fail in practice
    _report(f"dataflex-verl {__version__} could not install its verl plugin hook: {_exc!r}")
    raise
