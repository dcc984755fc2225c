"""Mount-time validation: build the ``dataflex:`` block against this verl configuration.

Runs in the trainer's constructor, before the first rollout, so a pipeline
that could not work in this run (a field nobody produces, groups under GAE, a
policy loss that ignores ``rollout_is_weights``, a distillation run without the
task policy loss) fails in seconds with one clear error instead of training
silently without DataFlex.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from dataflex_core import ConfigError, DataFlexPipeline, IncompatibleComponentError, build_from_config
from dataflex_core.config import default_is_group_estimator, to_plain

from .mechanisms import RUNNERS, WEIGHTLESS_MECHANISMS
from .mix import MIX_KEYS, MixSettings, mix_settings
from .weights import loss_unit

logger = logging.getLogger("dataflex_verl")

#: Keys of the ``dataflex:`` block this host reads itself, with their defaults.
HOST_KEYS = {"on_invalid": "raise", "plugins": None}  # plugins: lock / allow_drift, read by pinning.py
ON_INVALID = ("raise", "uniform")
#: Scorer timings that can run after verl has computed advantages.
RUNNABLE_TIMINGS = ("post_reward", "post_advantage")
#: verl 0.9 policy losses that multiply ``rollout_is_weights`` linearly into ``pg_losses``.
LINEAR_POLICY_LOSSES = frozenset(
    {"vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "dro", "cispo"}
)
#: Policy losses that do not apply ``rollout_is_weights`` as a linear per-token factor, and why.
REFUSED_POLICY_LOSSES = {
    "geo_mean": (
        "geo_mean takes a per-sequence geometric mean of rollout_is_weights (exp of the mean log weight), "
        "so DataFlex weights would not scale the loss linearly and their mean-one normalisation would not hold"
    ),
    "bypass_mode": "bypass_mode computes its own importance weights and ignores rollout_is_weights",
}
# algorithm.rollout_correction.bypass_mode=true is accepted: verl's legacy trainer switched the loss to
# loss_mode=bypass_mode (rollout_corr_helper.apply_bypass_mode), but the v1 trainers only reuse
# rollout_log_probs as old_log_probs and keep the configured policy loss, which multiplies rollout_is_weights.


def _cfg(config: Any, path: str, default: Any = None) -> Any:
    node = config
    for part in path.split("."):
        if node is None:
            return default
        try:
            node = node.get(part) if hasattr(node, "get") else getattr(node, part)
        except Exception:  # noqa: BLE001 - a missing key in struct mode
            return default
    return default if node is None else node


def is_group_estimator(name: str) -> bool | None:
    """Whether verl's estimator ``name`` groups samples by ``uid``.

    Read from verl's ``ADV_ESTIMATOR_REGISTRY``: an estimator that takes an
    ``index`` argument receives the group ids. Unregistered names fall back
    to dataflex-core's list for verl 0.9 (``None`` when unknown).
    """
    try:
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    except Exception:  # noqa: BLE001
        return default_is_group_estimator(name)
    fn = ADV_ESTIMATOR_REGISTRY.get(name)
    if fn is None:
        return default_is_group_estimator(name)
    try:
        return "index" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return default_is_group_estimator(name)


@dataclass(frozen=True)
class FieldSource:
    """Which part of the verl configuration writes a field to the queue."""

    produced: bool
    fix: str = ""


def field_sources(config: Any) -> dict[str, FieldSource]:
    """Queue fields present at ``_compute_advantage`` whose presence depends on the config.

    Fields not listed here (dataset columns such as ``data_source``) cannot be
    checked before the first step; the run-time read names them if missing.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    bypass = bool(_cfg(config, "algorithm.rollout_correction.bypass_mode", False))
    calculate_log_probs = bool(_cfg(config, "actor_rollout_ref.rollout.calculate_log_probs", False))
    rollout_is = _cfg(config, "algorithm.rollout_correction.rollout_is", None)
    always = FieldSource(True)
    return {
        "response_mask": always,
        "responses": always,
        "prompts": always,
        "input_ids": always,
        "position_ids": always,
        "loss_mask": always,
        "rm_scores": always,
        "advantages": always,
        "returns": always,
        "uid": always,
        "old_log_probs": always,
        "entropy": FieldSource(
            not bypass,
            "verl writes entropy when it recomputes old log-probs; set algorithm.rollout_correction.bypass_mode=false",
        ),
        "values": FieldSource(
            need_critic(config),
            "verl writes values only with a critic; set critic.enable=true or use adv_estimator=gae",
        ),
        "ref_log_prob": FieldSource(
            need_reference_policy(config),
            "verl writes ref_log_prob only with a reference policy; set actor_rollout_ref.actor.use_kl_loss=true "
            "or algorithm.use_kl_in_reward=true",
        ),
        "rollout_log_probs": FieldSource(calculate_log_probs, "set actor_rollout_ref.rollout.calculate_log_probs=true"),
        "token_level_rewards": FieldSource(
            bool(_cfg(config, "algorithm.use_kl_in_reward", False)),
            "verl writes token_level_rewards only with algorithm.use_kl_in_reward=true; read rm_scores instead",
        ),
        "rollout_is_weights": FieldSource(
            rollout_is is not None and calculate_log_probs and not bypass,
            "verl writes rollout_is_weights only with algorithm.rollout_correction.rollout_is set (token or "
            "sequence) and actor_rollout_ref.rollout.calculate_log_probs=true",
        ),
    }


@dataclass
class MountedDataFlex:
    """A validated pipeline plus everything the per-step hook needs from the verl config."""

    pipeline: DataFlexPipeline
    on_invalid: str
    adv_estimator: str
    loss_agg_mode: str
    policy_loss: str
    loss_unit: str
    #: Queue fields read each step (``response_mask`` first, ``uid`` when groups are needed).
    fields: list[str] = field(default_factory=list)
    #: field -> what in the verl config writes it, for run-time "missing field" errors.
    field_hints: dict[str, str] = field(default_factory=dict)
    #: ``mechanism: mix`` settings (domains, domain_key, update_step); ``None`` for other mechanisms.
    mix: MixSettings | None = None

    @property
    def mechanism(self) -> str:
        return self.pipeline.mechanism

    def describe(self) -> str:
        p = self.pipeline
        return (
            f"{p.mechanism}: scorer {p.scorer_spec.label} -> {p.actuator_spec.kind} {p.actuator_spec.label}; "
            f"loss_agg_mode={self.loss_agg_mode} (mean one per {self.loss_unit}), warmup_step={p.warmup_step}, "
            f"on_invalid={self.on_invalid}, reads {self.fields}"
        )


def dataflex_block(config: Any) -> Any:
    block = _cfg(config, "dataflex", None)
    if block is None:
        mode = _cfg(config, "trainer.v1.trainer_mode", "dataflex_sync")
        raise ConfigError(
            f"trainer.v1.trainer_mode={mode!r} needs a dataflex: block, but the config has none; add one, e.g. "
            "on the command line: +dataflex.mechanism=reweight +dataflex.scorer.name=advantage_magnitude "
            "+dataflex.actuator.name=softmax"
        )
    return block


def host_settings(block: Any) -> dict[str, Any]:
    plain = to_plain(block) or {}
    settings = {key: plain.get(key, default) for key, default in HOST_KEYS.items()}
    if settings["on_invalid"] not in ON_INVALID:
        raise ConfigError(
            f"dataflex.on_invalid={settings['on_invalid']!r} is not one of {', '.join(ON_INVALID)}; "
            "raise (default) stops the run on invalid plugin output, uniform uses weights 1 for that step"
        )
    return settings


def check_task_policy_loss(config: Any, mechanism: str) -> None:
    """Refuse distillation without task rewards: verl's task policy loss, which carries the weights, is zeroed.

    ``mix`` acts on sampling, not on the loss, and stays allowed.
    """
    if mechanism in WEIGHTLESS_MECHANISMS or not bool(_cfg(config, "distillation.enabled", False)):
        return
    if bool(_cfg(config, "distillation.distillation_loss.use_task_rewards", True)):
        return
    if bool(_cfg(config, "distillation.distillation_loss.use_policy_gradient", False)):
        where = (
            "sets the task policy loss to 0, so the weights would only scale the distillation policy-gradient "
            "term (its advantages are minus the distillation loss), not a task policy loss"
        )
    else:
        where = "skips the task policy loss altogether, so no loss multiplies rollout_is_weights"
    raise IncompatibleComponentError(
        f"dataflex.mechanism={mechanism!r} writes weights that verl's task policy loss multiplies in, but "
        "distillation.enabled=true with distillation.distillation_loss.use_task_rewards=false "
        f"{where} (verl/trainer/distillation/losses.py): dataflex would run and log without changing the "
        "training. Set distillation.distillation_loss.use_task_rewards=true, or use mechanism: mix (it acts on "
        "sampling), or remove the dataflex: block and select a plain verl trainer mode"
    )


def check_policy_loss(config: Any) -> tuple[str, str]:
    """The policy loss and aggregation mode, refused where ``rollout_is_weights`` is not a linear factor."""
    loss_mode = str(_cfg(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))
    if loss_mode in REFUSED_POLICY_LOSSES:
        raise IncompatibleComponentError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} cannot carry dataflex weights: "
            f"{REFUSED_POLICY_LOSSES[loss_mode]}; use one of {', '.join(sorted(LINEAR_POLICY_LOSSES))}"
        )
    if loss_mode not in LINEAR_POLICY_LOSSES:
        logger.warning(
            "policy loss %r is not one dataflex-verl knows to multiply rollout_is_weights into pg_losses; "
            "dataflex weights only act if it does",
            loss_mode,
        )
    loss_agg_mode = str(_cfg(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    return loss_mode, loss_agg_mode


def check_fields(config: Any, pipeline: DataFlexPipeline) -> None:
    sources = field_sources(config)
    owners = [(pipeline.scorer_spec, pipeline.scorer), (pipeline.actuator_spec, pipeline.actuator)]
    for spec, component in owners:
        for name in component.requires:
            source = sources.get(name)
            if source is not None and not source.produced:
                raise IncompatibleComponentError(
                    f"{spec.kind} {spec.label} requires the field {name!r}, which this verl configuration does "
                    f"not produce: {source.fix}"
                )


def mount(config: Any) -> MountedDataFlex:
    """Build and validate the ``dataflex:`` block of a verl config; raise one clear error on the first problem."""
    block = dataflex_block(config)
    settings = host_settings(block)
    adv_estimator = str(_cfg(config, "algorithm.adv_estimator", "gae"))
    pipeline = build_from_config(
        block,
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=(*HOST_KEYS, *MIX_KEYS),
    )
    mix = mix_settings(block) if pipeline.mechanism == "mix" else None
    stray = sorted(k for k in MIX_KEYS if k in pipeline.extra) if mix is None else []
    if stray:
        raise ConfigError(
            f"dataflex.{stray[0]} is read only by mechanism: mix, but dataflex.mechanism={pipeline.mechanism!r}; "
            f"remove {stray} or set mechanism: mix"
        )
    if pipeline.mechanism not in RUNNERS and pipeline.mechanism not in WEIGHTLESS_MECHANISMS:
        raise ConfigError(
            f"dataflex.mechanism={pipeline.mechanism!r} is not supported by dataflex-verl yet; "
            f"supported: {', '.join((*RUNNERS, *WEIGHTLESS_MECHANISMS))}"
        )
    timing = pipeline.scorer.timing
    if timing not in RUNNABLE_TIMINGS:
        raise IncompatibleComponentError(
            f"scorer {pipeline.scorer_spec.label} has timing={timing!r}, but dataflex-verl runs scorers in "
            f"_compute_advantage, after the reward and the advantages exist ({', '.join(RUNNABLE_TIMINGS)}); "
            f"a {timing} scorer cannot run in mechanism {pipeline.mechanism!r}. Pick a scorer with one of those timings"
        )
    check_task_policy_loss(config, pipeline.mechanism)
    policy_loss, loss_agg_mode = check_policy_loss(config)
    unit = loss_unit(loss_agg_mode, policy_loss)
    check_fields(config, pipeline)
    sources = field_sources(config)
    hints = {name: source.fix for name, source in sources.items() if source.fix}
    hints["rollout_is_weights"] = (
        "verl's rollout correction writes it in _compute_advantage; " + hints["rollout_is_weights"]
    )
    return MountedDataFlex(
        pipeline=pipeline,
        on_invalid=settings["on_invalid"],
        adv_estimator=adv_estimator,
        loss_agg_mode=loss_agg_mode,
        policy_loss=policy_loss,
        loss_unit=unit,
        fields=mechanism_fields(pipeline, mix),
        field_hints=hints,
        mix=mix,
    )


def mechanism_fields(pipeline: DataFlexPipeline, mix: MixSettings | None) -> list[str]:
    """Queue fields the step hook reads: the components' fields plus what the mechanism needs.

    ``select`` reads ``uid`` for its group metrics; ``mix`` reads the domain column.
    """
    fields = list(pipeline.requires)
    if pipeline.mechanism == "select":
        fields.append("uid")
    if mix is not None:
        fields.append(mix.domain_key)
    return list(dict.fromkeys(fields))
