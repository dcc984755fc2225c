"""Mount-time checks for TRL: the ``dataflex`` block against this ``GRPOConfig`` and dataset.

Runs in :class:`~dataflex_trl.DataFlexGRPOTrainer`'s constructor, so a
pipeline that could not work in this run (a field TRL does not compute here,
mix on a streaming dataset, a dataset column that is not there) fails before
the first generation with one error naming the setting to change.
"""

from __future__ import annotations

from typing import Any

from dataflex_core import ConfigError
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

#: ``loss_type`` -> the unit its policy term averages over (checked against TRL 1.16's ``_compute_loss``):
#: grpo and sapo take each sequence's token-mean, then the mean over sequences; the others divide
#: token sums by token counts (bnpo: the micro-batch's; dapo, cispo, vespo: ``num_items_in_batch``),
#: by ``B * max_completion_length`` (dr_grpo) or by the number of sequences (luspo).
LOSS_UNITS = {
    "grpo": SEQUENCE_UNIT,
    "sapo": SEQUENCE_UNIT,
    "bnpo": TOKEN_UNIT,
    "dapo": TOKEN_UNIT,
    "dr_grpo": TOKEN_UNIT,
    "cispo": TOKEN_UNIT,
    "vespo": TOKEN_UNIT,
    "luspo": TOKEN_UNIT,
}
#: Loss types whose denominator counts rows (or rows x max length), not the tokens in the loss mask;
#: a hard drop rescales the kept rows by rows / kept rows there (core's ``drop_denominator="rows"``).
ROW_DENOMINATOR_LOSSES = frozenset({"grpo", "sapo", "luspo", "dr_grpo"})
#: Loss types whose denominator is ``num_items_in_batch``, counted at generation time; a hard drop recounts it.
NUM_ITEMS_LOSSES = frozenset({"dapo", "cispo", "vespo"})


def loss_unit(loss_type: str) -> str:
    """The unit TRL's ``loss_type`` averages the policy term over."""
    try:
        return LOSS_UNITS[loss_type]
    except KeyError:
        raise ConfigError(
            f"GRPOConfig.loss_type={loss_type!r} is not one dataflex-trl knows how TRL normalises; "
            f"supported: {', '.join(LOSS_UNITS)}"
        ) from None


def is_map_dataset(dataset: Any) -> bool:
    """True for a dataset the trainer samples by index (so a sampler can choose prompts)."""
    from torch.utils.data import IterableDataset

    try:
        import datasets

        if isinstance(dataset, datasets.IterableDataset):
            return False
    except ImportError:  # pragma: no cover - TRL depends on datasets
        pass
    return dataset is not None and not isinstance(dataset, IterableDataset) and hasattr(dataset, "__len__")


#: Why TRL's GRPOTrainer cannot give prompts unequal rollout counts (``mechanism: allocate`` is refused at mount).
ALLOCATE_REASON = (
    "GRPOTrainer generates num_generations completions for every prompt: its RepeatSampler repeats each prompt "
    "num_generations times before generation and its advantages view the rewards as (-1, num_generations), so "
    "groups of unequal size cannot be expressed without replacing both (DataFlex does not); verl's V1 trainers "
    "(dataflex_sync) vary n per prompt"
)


def capabilities(args: Any, train_dataset: Any) -> HostCapabilities:
    """What TRL can do for DataFlex under ``args`` (a ``GRPOConfig``) with ``train_dataset``."""
    import trl

    vllm = bool(getattr(args, "use_vllm", False))
    loss_type = str(getattr(args, "loss_type", "dapo"))
    beta = float(getattr(args, "beta", 0.0) or 0.0)
    fields = {
        "response_mask": FieldSupport(True),
        "advantages": FieldSupport(True),
        "rm_scores": FieldSupport(True),
        "token_level_scores": FieldSupport(True),
        "uid": FieldSupport(True),
        # TRL's own when it computes them, else one extra forward pass without gradients
        "old_log_probs": FieldSupport(True),
        "entropy": FieldSupport(True),
        "rollout_log_probs": FieldSupport(
            vllm, "TRL has the sampler's log-probs only when generating with vLLM: set use_vllm=True"
        ),
        "ref_log_prob": FieldSupport(
            beta != 0.0, "TRL computes reference log-probs only with a KL term: set beta > 0 in GRPOConfig"
        ),
        "token_level_rewards": FieldSupport(
            False, "TRL applies its KL penalty in the loss (beta), not in the reward; read rm_scores instead"
        ),
        "values": FieldSupport(False, "TRL's GRPOTrainer has no critic; pick a scorer that does not read values"),
        "returns": FieldSupport(False, "TRL's GRPOTrainer computes no returns; read advantages instead"),
    }
    map_dataset = is_map_dataset(train_dataset)
    # refill rounds and stages draw their prompts by index; on several processes each generates an even share
    by_index = "" if map_dataset else "the train dataset is not a map-style dataset"
    return HostCapabilities(
        name=f"TRL {trl.__version__} GRPOTrainer",
        seams={
            LossWeights: SeamSupport(True),
            # mix, curriculum: TRL's prompt order over the session's sampler (_get_train_sampler)
            TrainSampler: SeamSupport(
                map_dataset, "" if map_dataset else "the train dataset is not a map-style dataset"
            ),
            # DataFlexGRPOTrainer generates further prompt batches until the batch is full (dataflex_trl.refill)
            GenerationRounds: SeamSupport(
                map_dataset, by_index and f"refill rounds draw prompts by index, and {by_index}"
            ),
            # GRPOTrainer generates num_generations completions for every prompt (its sampler repeats each prompt
            # num_generations times and its advantages reshape to (-1, num_generations))
            PromptCounts: SeamSupport(False, ALLOCATE_REASON),
            # DataFlexGRPOTrainer generates a step in stages, one TRL call each, one rollout count a call
            # (dataflex_trl.staged: TRL groups a call's rows evenly)
            StagedGeneration: SeamSupport(
                map_dataset, by_index and f"stages draw prompts by index, and {by_index}", mixed_counts=False
            ),
        },
        loss_units=(TOKEN_UNIT, SEQUENCE_UNIT),
        token_weights=True,
        hard_drop=True,
        # bnpo counts the micro-batch's mask, dapo/cispo/vespo recount num_items_in_batch; the others divide by rows
        drop_denominator="rows" if loss_type in ROW_DENOMINATOR_LOSSES else "tokens",
        recompute_advantage=True,
        # TRL's dataloader is rebuilt on resume (transformers skips the trained batches), not restored
        checkpoints_sampler=False,
        complete_groups=True,
        fields=fields,
        dataset_columns=not bool(getattr(args, "remove_unused_columns", False)),
        # pre_rollout scorers run in the train sampler (_get_train_sampler), for mechanism: curriculum
        timings=("pre_rollout", "post_reward", "post_advantage"),
    )


def dataset_columns(dataset: Any) -> list[str] | None:
    """The column names of a ``datasets`` dataset, or ``None`` when they cannot be known up front."""
    names = getattr(dataset, "column_names", None)
    return list(names) if isinstance(names, (list, tuple)) else None


class TrlTrainDataset:
    """A ``datasets`` train dataset as the session's train sampler reads it."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def columns(self) -> list[str] | None:
        return dataset_columns(self.dataset)

    def column(self, name: str) -> Any:
        return self.dataset[name]


def mount(session: DataFlexSession, args: Any, train_dataset: Any) -> None:
    """Build and check the session's ``dataflex`` block for this TRL run; one clear error on the first problem."""
    if session.block is None:
        raise ConfigError(
            "DataFlexGRPOTrainer needs dataflex={...}, e.g. dataflex={'mechanism': 'reweight', "
            "'scorer': {'name': 'advantage_magnitude'}, 'actuator': {'name': 'softmax'}}; without DataFlex use "
            "trl.GRPOTrainer"
        )
    loss_type = str(getattr(args, "loss_type", "dapo"))
    session.mount(
        capabilities(args, train_dataset),
        loss_unit=loss_unit(loss_type),
        ctx={"loss_type": loss_type, "adv_estimator": "grpo"},
        adv_estimator="grpo",
        is_group_estimator=lambda name: True,
    )
    session.check_dataset_columns(dataset_columns(train_dataset))
    check_stage_shares(session, args)


def check_stage_shares(session: DataFlexSession, args: Any) -> None:
    """On several processes each generation stage splits evenly over them (TRL gathers an equal share from each):
    the rollouts per prompt of every stage (``pilot.rollouts``, and the commit's top-up) must be multiples of the
    process count, or the run is refused here, before a step that happens to have an odd count stops it."""
    processes = int(getattr(args, "world_size", 1) or 1)
    settings = getattr(session.mechanism, "settings", None)
    if processes == 1 or session.seam(StagedGeneration) is None or not hasattr(settings, "rollouts"):
        return
    generations = int(getattr(args, "num_generations", 0) or 0)
    top_up = generations - (settings.rollouts if settings.keep else 0)
    counts = {"dataflex.pilot.rollouts": settings.rollouts, "the commit's top-up": top_up}
    uneven = {name: count for name, count in counts.items() if count > 0 and count % processes}
    if uneven:
        named = " and ".join(f"{name} ({count})" for name, count in uneven.items())
        raise ConfigError(
            f"this run has {processes} processes, and each generation stage of mechanism pilot splits its rollouts "
            f"evenly over them, but {named} is not a multiple of {processes}; set dataflex.pilot.rollouts and "
            f"num_generations={generations} so that both pilot.rollouts and num_generations minus it (with "
            f"pilot.keep, else num_generations) are multiples of {processes}"
        )
