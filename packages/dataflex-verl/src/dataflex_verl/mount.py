"""Mount-time validation: build the ``dataflex:`` block against this verl configuration.

Runs in the trainer's constructor, before the first rollout, so a pipeline
that could not work in this run (a field nobody produces, groups under GAE, a
policy loss that ignores ``rollout_is_weights``, a distillation run without the
task policy loss) fails in seconds with one clear error instead of training
silently without DataFlex. What verl can do in this configuration is declared
as core's :class:`~dataflex_core.step.HostCapabilities` (:func:`capabilities`);
core's :class:`~dataflex_core.session.DataFlexSession` pins the plugin set,
builds the block and checks it against that declaration.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from dataflex_core import ConfigError, IncompatibleComponentError
from dataflex_core.session import (
    SEQUENCE_UNIT,
    TOKEN_UNIT,
    DataFlexSession,
    FieldSupport,
    GenerationRounds,
    HostCapabilities,
    LossWeights,
    PromptCounts,
    SeamSupport,
    StagedGeneration,
    TrainSampler,
)

from .estimators import known_group_estimator
from .lines import LINE_KEY
from .weights import loss_unit

logger = logging.getLogger("dataflex_verl")

#: Scorer timings verl runs: after it has computed advantages, and before rollout in its train sampler
#: (``mechanism: curriculum``).
RUNNABLE_TIMINGS = ("pre_rollout", "post_reward", "post_advantage")
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
#: Policy losses that ignore ``rollout_is_weights`` but are linear in the advantage (legacy line: the weights
#: are multiplied into the advantages, :func:`scales_advantages`).
ADVANTAGE_SCALED_LOSSES = frozenset({"bypass_mode"})
# algorithm.rollout_correction.bypass_mode=true is accepted: verl's legacy trainer switched the loss to
# loss_mode=bypass_mode (rollout_corr_helper.apply_bypass_mode), but the v1 trainers only reuse
# rollout_log_probs as old_log_probs and keep the configured policy loss, which multiplies rollout_is_weights.


def config_value(config: Any, path: str, default: Any = None) -> Any:
    """``config.<path>`` (dotted), or ``default`` when a part is missing or None (struct mode included)."""
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
    to the lists for verl 0.9 (:mod:`dataflex_verl.estimators`; ``None`` when unknown).
    """
    try:
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    except Exception:  # noqa: BLE001
        return known_group_estimator(name)
    fn = ADV_ESTIMATOR_REGISTRY.get(name)
    if fn is None:
        return known_group_estimator(name)
    try:
        return "index" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return known_group_estimator(name)


def field_sources(config: Any) -> dict[str, FieldSupport]:
    """Queue fields present at ``_compute_advantage`` whose presence depends on the config.

    Fields not listed here (dataset columns such as ``data_source``) cannot be
    checked before the first step; the run-time read names them if missing.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    bypass = bool(config_value(config, "algorithm.rollout_correction.bypass_mode", False))
    calculate_log_probs = bool(config_value(config, "actor_rollout_ref.rollout.calculate_log_probs", False))
    rollout_is = config_value(config, "algorithm.rollout_correction.rollout_is", None)
    always = FieldSupport(True)
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
        "entropy": FieldSupport(
            not bypass,
            "verl writes entropy when it recomputes old log-probs; set algorithm.rollout_correction.bypass_mode=false",
        ),
        "values": FieldSupport(
            need_critic(config),
            "verl writes values only with a critic; set critic.enable=true or use adv_estimator=gae",
        ),
        "ref_log_prob": FieldSupport(
            need_reference_policy(config),
            "verl writes ref_log_prob only with a reference policy; set actor_rollout_ref.actor.use_kl_loss=true "
            "or algorithm.use_kl_in_reward=true",
        ),
        "rollout_log_probs": FieldSupport(
            calculate_log_probs, "set actor_rollout_ref.rollout.calculate_log_probs=true"
        ),
        "token_level_rewards": FieldSupport(
            bool(config_value(config, "algorithm.use_kl_in_reward", False)),
            "verl writes token_level_rewards only with algorithm.use_kl_in_reward=true; read rm_scores instead",
        ),
        "rollout_is_weights": FieldSupport(
            rollout_is is not None and calculate_log_probs and not bypass,
            "verl writes rollout_is_weights only with algorithm.rollout_correction.rollout_is set (token or "
            "sequence) and actor_rollout_ref.rollout.calculate_log_probs=true",
        ),
    }


#: Why a trainer line (or a setting of the legacy one) cannot refill a filtered batch (``mechanism: filter`` is
#: refused at mount with it).
REFILL_REASONS = {
    "v1": (
        "its V1 trainers refill only through their replay buffer's eviction and refill (verl#7082), which "
        "DataFlex does not drive: in verl 0.9.1 ReplayBuffer.sample evicts before advantages or log-probs exist, "
        "sees rewards only when they stream into TransferQueue (not with a colocated reward model), refills by "
        "credits (2 prompts per evicted group, bounded by max_inflight_gen_batches) with no cap on rounds and no "
        "short-step policy, and clears evicted groups before the step sees them, so filter.max_rounds, on_short "
        "and the per-prompt ledger would not hold; use verl's legacy trainer (trainer.use_v1=false), whose "
        "generation rounds DataFlex runs, or DataFlexGRPOTrainer (TRL)"
    ),
    "one_step_off": (
        "its one-step-off trainer generates the next step's batch while the current step trains (from its own "
        "prompt iterator, one generation per batch, with weights one update older), so a refill round would either "
        "wait for the update (losing the overlap the trainer exists for) or admit groups by a stale policy's "
        "rewards; use verl's legacy trainer (python -m verl.trainer.main_ppo trainer.use_v1=false)"
    ),
    "colocated_reward": (
        "with a colocated reward model (reward.reward_model.enable=true, enable_resource_pool=false) its legacy "
        "trainer computes rewards after the rollout is put to sleep (RayPPOTrainer._compute_reward_colocate), so a "
        "round's rewards do not exist before the next round would be generated; give the reward model a resource "
        "pool of its own (reward.reward_model.enable_resource_pool=true: verl's reward loop then streams rewards "
        "with the rollout) or use a rule reward"
    ),
    "remax": (
        "under algorithm.adv_estimator=remax its legacy trainer generates a greedy baseline with each batch in the "
        "same request, which the filter's generation rounds do not generate; use a group estimator such as grpo"
    ),
}
#: The fields verl's legacy fit computes after generation and reward: ``mechanism: filter`` admits each round's
#: groups before they exist.
AFTER_ADMISSION = (
    "old_log_probs", "entropy", "ref_log_prob", "values", "advantages", "returns", "token_level_rewards",
    "rollout_is_weights",
)  # fmt: skip


def refill_support(config: Any, line: str) -> str:
    """Why ``mechanism: filter`` cannot run on ``line`` under ``config`` ("" when it can: the legacy
    ``RayPPOTrainer`` with rewards streamed by verl's reward loop)."""
    from .lines import separated_trainer

    if line != "legacy":
        return REFILL_REASONS["v1"]
    if separated_trainer(config) == "one_step_off":
        return REFILL_REASONS["one_step_off"]
    reward_model = config_value(config, "reward.reward_model", None)
    if bool(config_value(reward_model, "enable", False)) and not bool(
        config_value(reward_model, "enable_resource_pool", False)
    ):
        return REFILL_REASONS["colocated_reward"]
    if str(config_value(config, "algorithm.adv_estimator", "gae")) == "remax":
        return REFILL_REASONS["remax"]
    return ""


def admission_fields(
    fields: dict[str, FieldSupport], admits: str = "mechanism filter on verl's legacy line admits each round's groups"
) -> dict[str, FieldSupport]:
    """``fields`` as the legacy line's rounds or stages have them when ``admits`` (the mechanism, what it admits):
    those verl computes later are not there."""
    fix = (
        f"{admits} right after rollout and reward, before "
        "verl computes log-probs, values and advantages; pick a scorer of the rewards (rm_scores), e.g. "
        "group_reward_variance"
    )
    return {name: FieldSupport(False, fix) if name in AFTER_ADMISSION else support for name, support in fields.items()}


#: Why a trainer line or mode cannot give prompts unequal rollout counts (``mechanism: allocate`` is refused at
#: mount with it).
ALLOCATE_REASONS = {
    "legacy": (
        "its legacy trainer (RayPPOTrainer.fit) repeats every prompt actor_rollout_ref.rollout.n times "
        "(DataProto.repeat, interleaved) inside its own loop, with no per-prompt count; use the V1 trainer "
        "trainer.v1.trainer_mode=dataflex_sync, whose agent loop reads a per-prompt __rollout_n__"
    ),
    "async": (
        "its asynchronous V1 trainers dispatch prompts in batches whose size follows the replay buffer's refills, "
        "so a budget per step's batch of prompts has nothing fixed to hold to; use trainer.v1.trainer_mode="
        "dataflex_sync"
    ),
}


#: Why ``mechanism: pilot`` (the staged-generation seam) cannot run on verl's V1 line.
STAGED_REASONS = {
    "v1": (
        "verl V1's agent loop rolls each prompt out once per dispatch with its __rollout_n__, and a later stage "
        "of the same prompt would be a second dispatch whose rollouts the replay buffer may hand to another "
        "step; the stages of one step under one uid and one set of weights are not guaranteed exactly"
    ),
}


def staged_support(config: Any, line: str) -> str:
    """Why ``mechanism: pilot`` cannot run on ``line`` under ``config`` ("" when it can).

    The legacy ``RayPPOTrainer`` generates the stages where fit pulls its prompts
    (:mod:`dataflex_verl.legacy_stages`) under the conditions of the filter's rounds: each stage's rewards
    streamed with its rollout, the step's weights throughout, no extra request riding with the batch.
    """
    return STAGED_REASONS["v1"] if line != "legacy" else refill_support(config, line)


def allocate_support(config: Any, line: str) -> str:
    """Why ``mechanism: allocate`` cannot run on ``line`` under ``config`` ("" when it can: V1 in sync mode)."""
    if line == "legacy":
        return ALLOCATE_REASONS["legacy"]
    mode = str(config_value(config, "trainer.v1.trainer_mode", "sync"))
    return "" if mode in ("sync", "dataflex_sync") else ALLOCATE_REASONS["async"]


def capabilities(config: Any, line: str = "v1") -> HostCapabilities:
    """What verl 0.9's trainers of ``line`` (``v1`` or ``legacy``) can do for DataFlex under ``config``.

    Per-token weights reach the policy loss through ``rollout_is_weights``;
    rows are never removed from verl's loss (a selector's drops are weight 0),
    but verl's own estimator can recompute group advantages on the kept rows;
    mix and curriculum (``pre_rollout`` scorers) act on the train dataloader's
    sampler, whose state verl's ``StatefulDataLoader`` checkpoints in ``data.pt``;
    the hook sees the whole global batch, so groups are complete. Fields a config may not produce are listed
    with the setting that produces them; names outside the vocabulary are
    dataset columns carried into the queue with the prompt. ``mechanism: filter`` refills on the legacy line
    (:mod:`dataflex_verl.legacy_rounds`), where its rounds admit groups after reward, before advantages.
    """
    refill = refill_support(config, line)
    allocate = allocate_support(config, line)
    staged = staged_support(config, line)
    fields = field_sources(config)
    screening = "mechanism pilot on verl's legacy line admits each screening stage's prompts"
    return HostCapabilities(
        name="verl",
        seams={
            LossWeights: SeamSupport(True),
            # mix, curriculum: verl's train dataloader draws through DataFlex's sampler
            TrainSampler: SeamSupport(True),
            # generation rounds where RayPPOTrainer.fit pulls its prompts (legacy line only); they admit each
            # round's groups at reward time, before advantages (pre_rollout: a filter.draw curriculum)
            GenerationRounds: SeamSupport(
                not refill, refill, fields=admission_fields(fields), timings=("pre_rollout", "post_reward")
            ),
            # V1's agent loop generates a per-prompt __rollout_n__ (verl#6340), which the trainer writes into each
            # prompt batch before dispatch (DataFlexTrainerMixin._submit_batch_to_rollout)
            PromptCounts: SeamSupport(not allocate, allocate),
            # mechanism pilot: stages of (prompt, rollouts) requests where RayPPOTrainer.fit pulls its prompts
            # (legacy line only), each screening stage admitted at reward time, before advantages (pre_rollout: a
            # pilot.draw curriculum, whose sampler draws fit's pull and the further screened prompts)
            StagedGeneration: SeamSupport(
                not staged,
                staged,
                timings=("pre_rollout", "post_reward"),
                fields=admission_fields(fields, screening),
            ),
        },
        loss_units=(TOKEN_UNIT, SEQUENCE_UNIT),
        token_weights=True,
        hard_drop=False,
        recompute_advantage=True,
        checkpoints_sampler=True,
        complete_groups=True,
        fields=fields,
        dataset_columns=True,
        timings=RUNNABLE_TIMINGS,
    )


def check_task_policy_loss(config: Any, session: DataFlexSession) -> None:
    """Refuse distillation without task rewards: verl's task policy loss, which carries the weights, is zeroed.

    A mechanism that writes no weights (``mix``, ``curriculum``: they act on sampling) stays allowed.
    """
    if session.seam(LossWeights) is None or not bool(config_value(config, "distillation.enabled", False)):
        return
    if bool(config_value(config, "distillation.distillation_loss.use_task_rewards", True)):
        return
    if bool(config_value(config, "distillation.distillation_loss.use_policy_gradient", False)):
        where = (
            "sets the task policy loss to 0, so the weights would only scale the distillation policy-gradient "
            "term (its advantages are minus the distillation loss), not a task policy loss"
        )
    else:
        where = "skips the task policy loss altogether, so no loss multiplies rollout_is_weights"
    raise IncompatibleComponentError(
        f"dataflex.mechanism={session.pipeline.mechanism!r} writes weights that verl's task policy loss multiplies "
        "in, but "
        "distillation.enabled=true with distillation.distillation_loss.use_task_rewards=false "
        f"{where} (verl/trainer/distillation/losses.py): dataflex would run and log without changing the "
        "training. Set distillation.distillation_loss.use_task_rewards=true, or use mechanism: mix (it acts on "
        "sampling), or remove the dataflex: block and select a plain verl trainer mode"
    )


def policy_loss_mode(config: Any) -> str:
    """``actor_rollout_ref.actor.policy_loss.loss_mode`` as configured (before verl's step may change it)."""
    return str(config_value(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))


def scales_advantages(config: Any, line: str) -> bool:
    """Whether the weights must ride in the advantages: the legacy line with a loss that ignores ``rollout_is_weights``.

    verl's ``bypass_mode`` loss (``policy_loss.loss_mode=bypass_mode``) never reads ``rollout_is_weights``;
    its per-token terms are linear in the advantage for a weight ``w >= 0`` (PPO's clipped objective
    ``min(r A, clip(r) A)`` times ``w`` is the objective of ``w A``), so multiplying the weights into the
    advantages applies them exactly. DataFlex's weights are never negative.
    """
    return line == "legacy" and policy_loss_mode(config) in ADVANTAGE_SCALED_LOSSES


def check_policy_loss(config: Any, line: str = "v1") -> tuple[str, str]:
    """The policy loss and aggregation mode, refused where no DataFlex weight can act linearly.

    :param line: ``v1`` or ``legacy`` (:mod:`dataflex_verl.lines`); the legacy line carries the weights of a
        loss that ignores ``rollout_is_weights`` in the advantages (:func:`scales_advantages`).
    """
    loss_mode = policy_loss_mode(config)
    if loss_mode in REFUSED_POLICY_LOSSES and not scales_advantages(config, line):
        also = (
            "; on verl's legacy line (trainer.use_v1=false) dataflex carries the weights in the advantages instead"
            if loss_mode in ADVANTAGE_SCALED_LOSSES
            else ""
        )
        raise IncompatibleComponentError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} cannot carry dataflex weights: "
            f"{REFUSED_POLICY_LOSSES[loss_mode]}; use one of {', '.join(sorted(LINEAR_POLICY_LOSSES))}{also}"
        )
    if loss_mode not in LINEAR_POLICY_LOSSES:
        logger.warning(
            "policy loss %r is not one dataflex-verl knows to multiply rollout_is_weights into pg_losses; "
            "dataflex weights only act if it does",
            loss_mode,
        )
    loss_agg_mode = str(config_value(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    return loss_mode, loss_agg_mode


def field_hints(host: HostCapabilities) -> dict[str, str]:
    """Field -> what in the verl config writes it, for the run-time "missing field" error."""
    hints = {name: source.fix for name, source in host.fields.items() if source.fix}
    hints["rollout_is_weights"] = (
        "verl's rollout correction writes it in _compute_advantage; " + hints["rollout_is_weights"]
    )
    return hints


def mount(config: Any, line: str = "v1") -> DataFlexSession:
    """The DataFlex session of a verl config: plugins pinned, the ``dataflex:`` block built and validated.

    One clear error on the first problem, before the first rollout.

    :param line: the trainer line that runs it, ``v1`` or ``legacy`` (:mod:`dataflex_verl.lines`).
    """
    # first: with dataflex.plugins.lock only locked plugins are imported, and any drift stops the run here
    session = DataFlexSession(config_value(config, "dataflex", None))
    if session.block is None:
        mode = config_value(config, "trainer.v1.trainer_mode", "dataflex_sync")
        raise ConfigError(
            f"trainer.v1.trainer_mode={mode!r} needs a dataflex: block, but the config has none; add one, e.g. "
            "on the command line: +dataflex.mechanism=reweight +dataflex.scorer.name=advantage_magnitude "
            "+dataflex.actuator.name=softmax"
        )
    adv_estimator = str(config_value(config, "algorithm.adv_estimator", "gae"))
    policy_loss, loss_agg_mode = check_policy_loss(config, line)
    session.mount(
        capabilities(config, line),
        loss_unit=loss_unit(loss_agg_mode, policy_loss),
        ctx={"loss_agg_mode": loss_agg_mode, "adv_estimator": adv_estimator},
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=(LINE_KEY,),
    )
    check_task_policy_loss(config, session)
    counts = session.seam(PromptCounts)
    if counts is not None:  # a budget the step's prompts cannot meet stops here
        prompts = int(config_value(config, "data.train_batch_size", 0))
        rollout_n = int(config_value(config, "actor_rollout_ref.rollout.n", 1))
        counts.check_budget(prompts, rollout_n, f"data.train_batch_size={prompts} prompts")
    return session
