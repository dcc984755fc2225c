"""The canonical field vocabulary: the names components read, whatever framework runs them.

Each host maps its own names to these and declares which it provides (:class:`~dataflex_core.step.HostCapabilities`);
any other name is a dataset column passed through from the prompt's row. In every host a component sees framework
padding as empty rows, an empty response as a row of weight 0 outside every statistic, and ``uid`` only when it sets
``needs_groups`` (:data:`dataflex_core.contracts.GROUPS_RULE`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Storage kinds: padded tensors live in ``batch.batch``, per-row objects in ``batch.non_tensor_batch``.
TENSOR = "tensor"
OBJECT = "object"


@dataclass(frozen=True)
class CanonicalField:
    """One name of the vocabulary: where it lives, its shape and what it holds."""

    name: str
    kind: str
    shape: str
    meaning: str


def _fields(*items: CanonicalField) -> dict[str, CanonicalField]:
    return {f.name: f for f in items}


#: name -> :class:`CanonicalField`. ``bs`` rows, ``L`` response positions (right-padded).
CANONICAL_FIELDS: dict[str, CanonicalField] = _fields(
    CanonicalField("response_mask", TENSOR, "(bs, L)", "1 on the response tokens the loss counts, 0 elsewhere"),
    CanonicalField("advantages", TENSOR, "(bs, L)", "the estimator's advantage per response token"),
    CanonicalField("returns", TENSOR, "(bs, L)", "the estimator's returns per response token"),
    CanonicalField("rm_scores", TENSOR, "(bs, L)", "outcome reward on the last response token, 0 elsewhere"),
    CanonicalField("token_level_scores", TENSOR, "(bs, L)", "reward per token before any KL penalty"),
    CanonicalField("token_level_rewards", TENSOR, "(bs, L)", "reward per token after the KL-in-reward penalty"),
    CanonicalField("old_log_probs", TENSOR, "(bs, L)", "log-probs of the response under the policy that sampled it"),
    CanonicalField("entropy", TENSOR, "(bs, L)", "entropy of the policy's next-token distribution"),
    CanonicalField("rollout_log_probs", TENSOR, "(bs, L)", "log-probs reported by the rollout engine (vLLM, SGLang)"),
    CanonicalField("ref_log_prob", TENSOR, "(bs, L)", "log-probs under the reference policy"),
    CanonicalField("values", TENSOR, "(bs, L)", "the critic's value estimates"),
    CanonicalField("uid", OBJECT, "(bs,)", "group id: rows sampled from the same prompt share it"),
)


def is_canonical(name: str) -> bool:
    """True for a vocabulary name; anything else is read as a dataset column."""
    return name in CANONICAL_FIELDS


#: What a ``pre_rollout`` scorer can read about each of ``n`` candidate prompts besides its dataset columns: its
#: place in the train dataset and the history the host keeps (every curriculum host provides all of them).
PROMPT_FIELDS: dict[str, CanonicalField] = _fields(
    CanonicalField(
        "prompt_index", TENSOR, "(n,)", "the prompt's row in the train dataset (int64, stable across resumes)"
    ),
    CanonicalField("prompt_id", OBJECT, "(n,)", "the prompt's id: its value in the dataset column dataflex.prompt_key"),
    CanonicalField("times_sampled", TENSOR, "(n,)", "training steps in which the prompt was rolled out (int64)"),
    CanonicalField("last_sampled_step", TENSOR, "(n,)", "the last such step, -1 if never (int64)"),
    CanonicalField("rollouts", TENSOR, "(n,)", "responses of the prompt scored so far (int64)"),
    CanonicalField("successes", TENSOR, "(n,)", "how many of them succeeded (float64; see dataflex.success_threshold)"),
    CanonicalField("reward_sum", TENSOR, "(n,)", "the sum of their rewards (float64)"),
    CanonicalField(
        "last_success_rate", TENSOR, "(n,)", "successes / rollouts at the last step it was rolled out, 0 if never"
    ),
    CanonicalField("rollouts_trained", TENSOR, "(n,)", "of its rollouts, those the loss trained on (int64)"),
    CanonicalField("rollouts_filtered", TENSOR, "(n,)", "of its rollouts, those a mechanism took out (int64)"),
    CanonicalField("tokens_generated", TENSOR, "(n,)", "the response tokens of its rollouts (int64)"),
    CanonicalField("reward_sq_sum", TENSOR, "(n,)", "the sum of its rewards' squares (float64; the variance)"),
    CanonicalField("uniform_reward_steps", TENSOR, "(n,)", "steps in which every response got the same reward (int64)"),
    CanonicalField(
        "uniform_reward_streak", TENSOR, "(n,)", "its latest steps in a row in which every response got one reward"
    ),
)

#: One row per prompt rolled out in a finished step, as ``Scorer.observe`` receives it (``m`` prompts).
OUTCOME_FIELDS: dict[str, CanonicalField] = _fields(
    CanonicalField("prompt_index", TENSOR, "(m,)", "the prompt's row in the train dataset (int64)"),
    CanonicalField("prompt_id", OBJECT, "(m,)", "the prompt's id (dataset column dataflex.prompt_key)"),
    CanonicalField(
        "rollouts", TENSOR, "(m,)", "its responses with a non-empty response_mask in this step (int64, >= 1)"
    ),
    CanonicalField("successes", TENSOR, "(m,)", "how many of them succeeded (float64, 0..rollouts)"),
    CanonicalField("reward_mean", TENSOR, "(m,)", "the mean reward of those responses (float64)"),
    CanonicalField("uniform_reward", TENSOR, "(m,)", "True when every response got the same reward (no GRPO signal)"),
)


def is_prompt_field(name: str) -> bool:
    """True for a field of :data:`PROMPT_FIELDS`; a ``pre_rollout`` component's other names are dataset columns."""
    return name in PROMPT_FIELDS
