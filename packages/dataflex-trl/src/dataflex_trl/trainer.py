"""``DataFlexGRPOTrainer``: TRL's ``GRPOTrainer`` with the DataFlex step applied to each generation batch.

The host is a small subclass over four of TRL's overridable methods, as TRL's
own experimental trainers are:

- ``_calculate_rewards``: keeps the per-function rewards TRL gathered across
  processes (the reward of each completion);
- ``_generate_and_score_completions``: after TRL has generated, scored and
  computed its advantages, maps the batch to the canonical fields, runs the
  core step on the whole (gathered) generation batch and scales TRL's
  advantages per token by the weights. For ``w >= 0`` every TRL loss type is
  linear in the advantage of its policy term (``-min(c1 w A, c2 w A) =
  -w min(c1 A, c2 A)``), so this is exactly a per-token weight on the policy
  term; the KL and entropy terms stay unweighted. Under ``filter`` it adds
  generation rounds (:mod:`dataflex_trl.refill`); under ``pilot`` the step's
  rows come from its stages, one TRL call each (:mod:`dataflex_trl.staged`);
- ``_get_train_sampler``: for a mechanism that draws the prompts (``mix``:
  by domain proportions; ``curriculum``: by a ``pre_rollout`` scorer and a
  sampler over a per-prompt history that each generation batch's rewards
  feed), TRL's prompt order over the session's sampler
  (:mod:`dataflex_trl.sampler`);
- ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: the plugin set and
  the components' state travel with TRL's checkpoints
  (:mod:`dataflex_trl.checkpoint`).

The lifecycle itself (plugin pinning, mounting, the mechanism, the train
sampler, component state, metrics) is core's
:class:`~dataflex_core.session.DataFlexSession`; this module is TRL's I/O.

Evaluation batches are left as TRL computes them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer

from dataflex_core import Batch
from dataflex_core.groups import consecutive_group_rows
from dataflex_core.session import DataFlexSession, GenerationRounds, LossWeights, StagedGeneration

from . import distributed, refill, staged
from .advantages import completion_rewards, grpo_advantages
from .checkpoint import DataFlexCheckpointMixin
from .mount import TrlTrainDataset, mount
from .sampler import MixtureRepeatSampler
from .version import __version__

logger = logging.getLogger("dataflex_trl")

#: Inputs of the policy's forward pass that ``_compute_loss`` passes through (multimodal models).
FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
#: Canonical fields TRL's output carries, by TRL's name.
TRL_FIELDS = {
    "old_log_probs": "old_per_token_logps",
    "ref_log_prob": "ref_per_token_logps",
    "rollout_log_probs": "sampling_per_token_logps",
}


def fingerprint(result: dict[str, Any]) -> str:
    """A digest of a step's result (its tensors and metrics, the seconds left out), equal on every process whose
    replica took the same decision."""
    digest = hashlib.sha256()
    for key in sorted(result):
        value = result[key]
        if key == "metrics":
            value = sorted((k, v) for k, v in value.items() if not k.endswith("_s"))
        if isinstance(value, torch.Tensor):
            digest.update(f"{key}:{value.dtype}:{tuple(value.shape)}".encode())
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(f"{key}:{value!r}".encode())
    return digest.hexdigest()[:16]


class DataFlexGRPOTrainer(DataFlexCheckpointMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` with a ``dataflex`` block: the same constructor plus ``dataflex={...}``.

    ``dataflex`` is the block verl users write under ``dataflex:`` (``mechanism``,
    ``scorer``, ``actuator``, ``warmup_step``, ``on_invalid``, ``plugins``, and for
    mix ``domains``, ``domain_key``, ``update_step``). Everything checkable is
    checked here, before the first generation; with ``plugins.lock`` only the
    locked plugins are imported and any drift stops the run.
    """

    #: The train sampler that draws the prompts for mix and curriculum (``None``: TRL's own order).
    _dataflex_draws: MixtureRepeatSampler | None = None

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: Any = None,
        train_dataset: Any = None,
        *more: Any,
        dataflex: Any = None,
        **kwargs: Any,
    ) -> None:
        # first: with plugins.lock only locked plugins are imported, and any drift stops the run here
        self.dataflex = DataFlexSession(dataflex)
        if args is not None:  # mounted before TRL builds anything; without args, once TRL made its default
            mount(self.dataflex, args, train_dataset)
        super().__init__(model, reward_funcs, args, train_dataset, *more, **kwargs)
        if args is None:
            mount(self.dataflex, self.args, train_dataset)
        self._dataflex_rewards_per_func: torch.Tensor | None = None
        rounds = self.dataflex.seam(GenerationRounds)
        if rounds is not None:  # what the refill rounds draw from, before any resume restores its position
            rounds.prepare(
                len(self.train_dataset), batch_size=self.args.generation_batch_size // self.num_generations,
                seed=self.args.seed,
            )  # fmt: skip
        stages = self.dataflex.seam(StagedGeneration)
        if stages is not None:  # what the stages draw their prompts from, before any resume restores its position
            stages.prepare(
                len(self.train_dataset), batch_size=self.args.generation_batch_size // self.num_generations,
                seed=self.args.seed,
            )  # fmt: skip
        logger.info("dataflex-trl %s mounted: %s", __version__, self.dataflex.describe())

    # -- TRL's seams ---------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._dataflex_rewards_per_func = rewards_per_func  # gathered across processes by TRL
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._dataflex_rewards_per_func = None
        step = int(self.state.global_step) + 1  # the optimizer step this generation batch trains, from 1
        in_stages = self.dataflex.seam(StagedGeneration) if self.model.training else None
        if in_stages is not None and self.dataflex.idle(step) is None:  # the step's rows come from its stages
            began = time.perf_counter()
            inputs, output, stages = self._dataflex_stages(in_stages, step)
            metrics = self._dataflex_on_generation(inputs, output, step, time.perf_counter(), generation=stages)
            metrics["dataflex/pilot/stages_time_s"] = time.perf_counter() - began
            return self._dataflex_log(output, metrics)
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        rounds, rounds_time = None, None
        seam = self.dataflex.seam(GenerationRounds)
        if seam is not None and self.dataflex.idle(step) is None:
            began = time.perf_counter()  # the refill rounds' generation is TRL's work, not the hook's
            inputs, output, rounds = self._dataflex_rounds(seam, inputs, output, step)
            rounds_time = time.perf_counter() - began
        metrics = self._dataflex_on_generation(inputs, output, step, time.perf_counter(), generation=rounds)
        if rounds_time is not None:
            metrics["dataflex/filter/rounds_time_s"] = rounds_time
        return self._dataflex_log(output, metrics)

    def _dataflex_log(self, output: dict, metrics: dict[str, float]) -> dict:
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)
        return output

    def _dataflex_generate(self, rows: list[dict], group_size: int) -> tuple[list[dict], dict, torch.Tensor]:
        """TRL's own generation and scoring of one round's ``rows`` (every process's, in process order, each group
        ``group_size`` consecutive rows): this process generates its even share; TRL gathers the rewards and
        computes the advantages within those groups. Returns this process's rows, its output and the gathered
        rewards per function."""
        local = distributed.local_part(self.accelerator, rows)
        uniform = self.num_generations
        self.num_generations = group_size  # TRL's group statistics view the rewards as (-1, num_generations)
        self._dataflex_rewards_per_func = None
        try:
            output = GRPOTrainer._generate_and_score_completions(self, local)
        finally:
            self.num_generations = uniform
        return local, output, self._dataflex_rewards_per_func

    def _dataflex_rounds(
        self, seam: GenerationRounds, inputs: list[dict], output: dict, step: int
    ) -> tuple[list[dict], dict, Any]:
        """The generation-rounds seam (``mechanism: filter``): TRL's round, further rounds of the seam's rows
        (``refill_rows``: its refill sampler's, or with ``filter.draw`` the train sampler's, sized by the mechanism)
        while too few groups are admitted, then the chosen groups of every round as one generation batch (:mod:`dataflex_trl.refill`).

        On several processes every process runs the same rounds: each generates its share of a round, the main
        process admits on the gathered round and the others take its decision."""
        size, accelerator = self.num_generations, self.accelerator
        rounds = seam.rounds(self.args.generation_batch_size // size)
        pool = [(distributed.gather_values(accelerator, inputs), output, self._dataflex_rewards_per_func)]
        batch = self._dataflex_batch(inputs, output)[0]
        admission = f"the admission of step {step}'s generation round"
        distributed.decide_on_main(accelerator, rounds, lambda batch=batch: seam.admit(rounds, batch, step), admission)
        while rounds.needs_refill:  # a round of as many prompts as the mechanism sizes it (the same on every process)
            more = [self.train_dataset[int(i)] for i in seam.refill_rows(rounds) for _ in range(size)]
            local, generated, rewards = self._dataflex_generate(more, size)
            pool.append((more, generated, rewards))
            batch = self._dataflex_batch(local, generated)[0]
            distributed.decide_on_main(
                accelerator, rounds, lambda batch=batch: seam.admit(rounds, batch, step), admission
            )
        if rounds.rounds == 1 and rounds.admitted_groups == rounds.groups:
            self._dataflex_rewards_per_func = pool[0][2]
            return inputs, output, rounds  # every group admitted at once: TRL's batch as it is
        rows = [consecutive_group_rows(keep, size) for keep in rounds.chosen()]
        inputs, output = self._dataflex_assemble(pool, rows)
        return inputs, output, rounds

    def _dataflex_stages(self, seam: StagedGeneration, step: int) -> tuple[list[dict], dict, Any]:
        """The staged-generation seam (``mechanism: pilot``): each stage's requests generated by TRL (every prompt
        of a stage the same number of times), observed by the seam, then the trained rows of every stage as one
        generation batch, each group's rows together and its advantages TRL's on the whole group.

        The step's prompts are the stages' (drawn by the seam); the dataloader's draw for the step is not generated.
        """
        size, accelerator = self.num_generations, self.accelerator
        stages = seam.stages(self.args.generation_batch_size // size, rollout_n=size)
        pool, uids = [], []
        while (asked := stages.next()) is not None:
            count = staged.uniform_count(asked)
            more = [self.train_dataset[int(i)] for i in asked.prompts.tolist() for _ in range(count)]
            row_uid = asked.uids.repeat_interleave(asked.counts)
            local, generated, rewards = self._dataflex_generate(more, count)
            pool.append((more, generated, rewards))
            uids.append(row_uid)
            batch = self._dataflex_batch(local, generated, uids=row_uid)[0]
            distributed.decide_on_main(
                accelerator, stages, lambda batch=batch: seam.observe(stages, batch, step),
                f"the observation of step {step}'s generation stage",
            )  # fmt: skip
        trained = stages.trained()
        order = staged.group_order([uid[rows] for uid, rows in zip(uids, trained)], size)
        if len(pool) == 1 and len(trained[0]) == len(uids[0]) and bool((order == torch.arange(len(order))).all()):
            ((rows, output, rewards),) = pool  # one stage of whole groups, all trained: TRL's batch as it is
            self._dataflex_rewards_per_func = rewards
            return distributed.local_part(accelerator, rows), output, stages
        inputs, output = self._dataflex_assemble(pool, trained, order)
        advantages = grpo_advantages(
            self._dataflex_rewards_per_func.cpu(), self.reward_weights.cpu(), size,
            scale_rewards=self.scale_rewards, aggregation=self.multi_objective_aggregation,
        )  # fmt: skip
        mine = distributed.local_rows(accelerator, len(advantages) // accelerator.num_processes)
        output["advantages"] = advantages[mine].to(output["advantages"].device, output["advantages"].dtype)
        return inputs, output, stages

    def _dataflex_assemble(
        self, pool: list[tuple[list[dict], dict, torch.Tensor]], rows: list[torch.Tensor], order: Any = None
    ) -> tuple[list[dict], dict]:
        """The rows ``rows[i]`` of each round ``pool[i]`` (its rows of every process, this process's output, the
        gathered rewards), in that order or permuted by ``order``, as one generation batch: this process's rows
        and output; the gathered rewards of the batch in ``self._dataflex_rewards_per_func``."""
        accelerator, pad = self.accelerator, self._dataflex_pad_token_id()
        full = [distributed.gather_output(accelerator, out, pad, refill.LEFT_PADDED) for _, out, _ in pool]
        merged = refill.merge_outputs(full, rows, pad_token_id=pad)
        rewards = torch.cat([rpf[r.to(rpf.device)] for (_, _, rpf), r in zip(pool, rows)])
        inputs = [every[i] for (every, _, _), r in zip(pool, rows) for i in r.tolist()]
        if order is not None:
            merged = {k: v[order.to(v.device)] if refill.is_per_row(k) else v for k, v in merged.items()}
            rewards = rewards[order.to(rewards.device)]
            inputs = [inputs[i] for i in order.tolist()]
        self._dataflex_rewards_per_func = rewards
        return distributed.local_part(accelerator, inputs), distributed.local_output(accelerator, merged)

    def _dataflex_pad_token_id(self) -> int:
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        pad = getattr(tokenizer, "pad_token_id", None)
        return 0 if pad is None else int(pad)

    def _get_train_sampler(self, dataset=None):
        dataset = self.train_dataset if dataset is None else dataset
        block = self.dataflex.train_sampler(
            TrlTrainDataset(dataset), batch_size=self.args.generation_batch_size // self.num_generations,
            seed=self.args.seed,
        )  # fmt: skip
        if block is None:  # the mechanism leaves the prompts to TRL
            return super()._get_train_sampler(dataset)
        self._dataflex_draws = MixtureRepeatSampler(
            block, self.num_generations, self.num_iterations * self.args.steps_per_generation
        )
        return self._dataflex_draws

    # -- the step ------------------------------------------------------------------------
    def _dataflex_on_generation(
        self, inputs: list[dict], output: dict, step: int, start: float, generation: Any = None
    ) -> dict[str, float]:
        """Run the session's step on the gathered generation batch and apply its result to this process's ``output``.

        :param generation: the generation rounds that built ``output`` (``session.seam(GenerationRounds)``), if any.
        """
        accelerator = self.accelerator
        name = self.dataflex.mechanism.name
        if self._dataflex_draws is not None:  # every process's replica drew the same prompts, or the run stops
            drawn = ("ok", self._dataflex_draws.drawn())
            distributed.agree(
                accelerator, drawn, f"the prompts mechanism {name}'s train sampler drew up to step {step}"
            )
        idle = self.dataflex.idle(step)
        if idle is not None:  # TRL's step as it is; its rollouts still count
            mask = distributed.gather_rows(accelerator, self._dataflex_loss_mask(output)).cpu()
            advantages = distributed.gather_rows(accelerator, output["advantages"]).cpu()
            return {**idle, **self.dataflex.count(mask, advantages)}
        batch, loss_mask, advantages = self._dataflex_batch(inputs, output)
        mechanism = self.dataflex.mechanism
        weighs = self.dataflex.seam(LossWeights) is not None
        importance = self._dataflex_importance_weights(output) if weighs else None

        def compute() -> dict[str, Any]:
            return self._dataflex_result(batch, loss_mask, step, importance, start, advantages, generation)

        if mechanism.runs_on_every_process:  # every process feeds its replica the same gathered batch
            result, error = None, None
            try:
                result = compute()
                outcome: tuple[str, Any] = ("ok", fingerprint(result))
            except Exception as exc:  # noqa: BLE001 - raised on every process by agree()
                error, outcome = exc, ("error", f"{type(exc).__name__}: {exc}")
            distributed.agree(accelerator, outcome, f"step {step} of mechanism {name}", error)
        else:  # the main process runs the components; the others take its result and what it shares
            result = distributed.from_main(
                accelerator, lambda: {**compute(), "shared": self.dataflex.shared_state()},
                f"step {step} of mechanism {name}",
            )  # fmt: skip
            if not accelerator.is_main_process:
                self.dataflex.load_shared_state(result["shared"])
        if result["factor"] is None:  # inactive, a uniform fallback, or a mechanism on the sampler: TRL's loss
            return result["metrics"]
        rows = distributed.local_rows(accelerator, len(output["advantages"]))
        device = output["advantages"].device
        advantages = output["advantages"] if result["advantages"] is None else result["advantages"][rows].to(device)
        factor = result["factor"][rows].to(device)
        mask = self._dataflex_loss_mask(output)
        if result["kept"] is not None:  # hard drop: the dropped rows leave the loss mask and its token count
            keep = result["kept"][rows].to(device)
            output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(
                output["completion_mask"].dtype
            )
            if "tool_mask" in output:
                output["tool_mask"] = output["tool_mask"] * keep.unsqueeze(1).to(output["tool_mask"].dtype)
            output["num_items_in_batch"] = torch.as_tensor(
                result["num_items"], dtype=output["num_items_in_batch"].dtype, device=device
            )
            mask = self._dataflex_loss_mask(output)
        token_weights = self._dataflex_token_weights(factor, mask)
        output["advantages"] = advantages.reshape(-1, 1).to(torch.float32) * token_weights
        return result["metrics"]

    def _dataflex_token_weights(self, factor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` float32: the weight of each token of TRL's loss (``factor`` per row or per token, 0 off ``mask``)."""
        weights = factor.unsqueeze(1) * mask if factor.dim() == 1 else factor[:, : mask.shape[1]] * mask
        return weights.to(torch.float32)

    def _dataflex_result(
        self,
        batch: Batch,
        loss_mask: torch.Tensor,
        step: int,
        importance: torch.Tensor | None,
        start: float,
        advantages: torch.Tensor,
        generation: Any = None,
    ) -> dict[str, Any]:
        """The session's step: the factor to apply (and, for a hard drop, kept rows, new advantages, token count)."""
        result = self.dataflex.run(
            batch, step, importance_weights=importance, start=start, advantages=advantages, generation=generation
        )
        out: dict[str, Any] = {"metrics": result.metrics, "factor": None, "kept": None, "advantages": None}
        if result.factor is None:
            return out
        out["factor"] = result.factor.cpu()  # TRL's loss applies its own importance ratio: the factor alone
        if result.recompute_advantage:
            out["advantages"] = self._dataflex_advantages(result.kept.cpu())
        if result.hard_drop:
            kept = result.kept.cpu()
            out["kept"] = kept
            out["num_items"] = int((loss_mask * kept.unsqueeze(1).to(loss_mask.dtype)).sum())
        result.timed(start)
        return out

    def _dataflex_advantages(self, kept: torch.Tensor) -> torch.Tensor:
        """TRL's group advantages on the kept rows alone (dropped rows get 0), from the gathered rewards.

        With the hard drop the policy term is the one TRL computes on a batch of the kept rows alone: the
        session's factor weighs each kept row 1 where the loss recounts its tokens (bnpo per micro-batch,
        dapo/cispo/vespo through ``num_items_in_batch``) and ``rows / kept rows`` where it counts rows (grpo,
        sapo, luspo, dr_grpo).
        """
        return grpo_advantages(
            self._dataflex_rewards_per_func.cpu(),
            self.reward_weights.cpu(),
            self.num_generations,
            scale_rewards=self.scale_rewards,
            aggregation=self.multi_objective_aggregation,
            kept=kept,
        )

    # -- TRL's fields in the canonical vocabulary -----------------------------------------
    def _dataflex_loss_mask(self, output: dict) -> torch.Tensor:
        """The tokens TRL's loss counts: ``completion_mask`` (times ``tool_mask`` in multi-turn runs)."""
        mask = output["completion_mask"]
        return mask * output["tool_mask"] if "tool_mask" in output else mask

    def _dataflex_importance_weights(self, output: dict) -> torch.Tensor | None:
        """TRL's vLLM importance-sampling ratio (gathered, ``(B, L)``) when its loss multiplies it in."""
        if not (self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo"):
            return None
        ratio = output["importance_sampling_ratio"]
        mask = self._dataflex_loss_mask(output)
        ratio = ratio.expand_as(mask) if ratio.shape[1] == 1 else ratio
        return distributed.gather_rows(self.accelerator, ratio.to(torch.float32)).cpu()

    def _dataflex_policy_fields(self, output: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log-probs, entropy)`` of the completions under the current policy: one forward pass, no gradients.

        Before the update the current policy is the one that sampled, so these are the old log-probs
        TRL itself computes when it needs them.
        """
        from trl.models.utils import disable_gradient_checkpointing

        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        extra = {key: output[key] for key in FORWARD_KEYS if key in output}
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, entropy, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                output["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
                compute_entropy=True,
                **extra,
            )
        return logps, entropy

    def _dataflex_batch(
        self, inputs: list[dict], output: dict, uids: torch.Tensor | None = None
    ) -> tuple[Batch, torch.Tensor, torch.Tensor]:
        """The whole generation batch (every process's rows) in the canonical fields the step reads, TRL's loss
        mask of those rows and TRL's ``(B,)`` advantages (for the compute counters).

        ``uid`` is the prompt group (``num_generations`` consecutive rows, or ``uids``: each gathered row's, as a
        stage's requests give them); ``rm_scores`` /
        ``token_level_scores`` hold TRL's reward (weighted sum over reward functions) on the last
        response token. Completions no reward function scored get an empty ``response_mask`` here:
        TRL gives them advantage 0 and leaves them out of its group statistics, and so do components.
        """
        accelerator = self.accelerator
        fields = set(self.dataflex.fields)
        loss_mask = self._dataflex_loss_mask(output)
        local: dict[str, torch.Tensor] = {"loss_mask": loss_mask, "advantages": output["advantages"]}
        for name, trl_name in TRL_FIELDS.items():
            if name in fields and output.get(trl_name) is not None:
                local[name] = output[trl_name]
        if ("entropy" in fields) or ("old_log_probs" in fields and "old_log_probs" not in local):
            logps, entropy = self._dataflex_policy_fields(output)
            local.setdefault("old_log_probs", logps)
            local["entropy"] = entropy
        gathered = {name: distributed.gather_rows(accelerator, value).cpu() for name, value in local.items()}
        rpf = self._dataflex_rewards_per_func.cpu()
        reward, scored = completion_rewards(rpf, self.reward_weights.cpu())
        mask = gathered.pop("loss_mask")
        response_mask = mask.bool() & scored.unsqueeze(1)
        tensors: dict[str, torch.Tensor] = {"response_mask": response_mask.to(torch.int64)}
        advantages = gathered.pop("advantages")
        if "advantages" in fields:
            tensors["advantages"] = advantages.to(torch.float32).unsqueeze(1) * response_mask
        for name in ("old_log_probs", "entropy", "ref_log_prob", "rollout_log_probs"):
            if name in gathered and name in fields:
                tensors[name] = own_copy(gathered[name].to(torch.float32), output.get(TRL_FIELDS.get(name, "")))
        if fields & {"rm_scores", "token_level_scores"}:
            scores = last_token_values(reward, response_mask)
            for name in ("rm_scores", "token_level_scores"):
                if name in fields:
                    tensors[name] = scores
        objects: dict[str, np.ndarray] = {}
        if "uid" in fields:
            group = np.arange(len(reward), dtype=np.int64) // self.num_generations
            objects["uid"] = group if uids is None else uids.cpu().numpy().astype(np.int64)
        columns = [name for name in fields if name not in tensors and name != "uid"]
        for name in columns:
            values = distributed.gather_values(accelerator, [row.get(name) for row in inputs])
            column = np.empty(len(values), dtype=object)
            column[:] = values
            objects[name] = column
        return Batch(tensors, objects), mask, advantages


def own_copy(value: torch.Tensor, trl_value: Any) -> torch.Tensor:
    """``value``, cloned when it shares memory with TRL's ``trl_value`` (one CPU process: no gather, no move).

    Components get read-only inputs, and the step refuses one that changed them; TRL's own tensors
    (``old_per_token_logps`` is its importance ratio's denominator) must stay as TRL computed them even then.
    """
    if (
        isinstance(trl_value, torch.Tensor)
        and value.untyped_storage().data_ptr() == trl_value.untyped_storage().data_ptr()
    ):
        return value.clone()
    return value


def last_token_values(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` values placed on each row's last ``mask`` token of a ``(B, L)`` float32 tensor, 0 elsewhere."""
    mask = mask.bool()
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(dim=1)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rows = last >= 0
    out[rows.nonzero(as_tuple=True)[0], last[rows]] = values.to(torch.float32)[rows]
    return out
