"""``mechanism: filter`` on verl's legacy line: generation rounds where ``RayPPOTrainer.fit`` pulls its prompts.

``RayPPOTrainer.fit`` pulls each step's prompt batch from ``self.train_dataloader``
after the previous step's weight sync (the rollout replicas are awake, with the
weights the step trains), gives every prompt a ``uid``, generates it
``rollout.n`` times through ``self.async_rollout_manager.generate_sequences``,
sleeps the replicas and works on the rows it got back from there on (rewards,
log-probs, ``compute_advantage``, the actor). The rounds run at that pull
(:class:`RoundsLoader`), so fit itself is not changed: the pulled batch is the
first round; each round is generated as fit generates (same meta-info and
repetition), admitted whole groups at a time by the session on the rewards
verl's reward loop streams with the rollout (``rm_scores``), and, while too
few groups are admitted and ``filter.max_rounds`` allows, a refill prompt batch
is drawn from the session's refill sampler (with ``filter.draw``: the train
sampler the mix or curriculum drives). The replicas stay awake throughout, as
they are for fit's one generation. The loader then yields exactly the chosen
prompts, and fit's own generate call gets their rollouts back
(:class:`RoundsRollout`), under the uids fit gave them.

The rounds ran before fit's step timer started, so their wall time is handed
to fit's ``gen`` and ``step`` timers through the rollout's timing (verl adds
its own measurement to what the rollout reports), and logged as
``dataflex/filter/rounds_time_s``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dataflex_core import ConfigError
from dataflex_core.groups import consecutive_group_rows, group_index
from dataflex_core.session import GenerationRounds

from . import dataproto_io

#: The rollout field whose rewards admit a round's groups (verl's reward loop writes it with the rollout).
REWARD_FIELD = "rm_scores"
#: The generation rows' column of the rollouts a row's group already has this step (``roll_out(offsets=...)``).
ROLLOUT_OFFSET = "dataflex_rollout_offset"
#: The dataset column that names each prompt's row (verl's ``RLHFDataset`` writes it), checked on fit's call.
ROW_COLUMN = "index"


@dataclass
class Round:
    """One generation round: its prompts (verl's collated dict), their rollouts, and each group's prompt row."""

    prompts: dict[str, Any]
    rollouts: Any
    #: ``prompt_of_group[g]``: the prompt row of group ``g`` (groups in the session's sorted-``uid`` order).
    prompt_of_group: torch.Tensor


def select_rows(batch_dict: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """Rows ``rows`` of verl's collated prompt dict (tensors and object arrays)."""
    picked = rows.numpy()
    return {key: value[rows] if isinstance(value, torch.Tensor) else value[picked] for key, value in batch_dict.items()}


def concat_rows(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The collated prompt dicts ``parts`` as one, in order."""
    out = {}
    for key, value in parts[0].items():
        join = torch.cat if isinstance(value, torch.Tensor) else np.concatenate
        out[key] = join([part[key] for part in parts])
    return out


def prompt_count(batch_dict: dict[str, Any]) -> int:
    return len(next(iter(batch_dict.values())))


@dataclass
class Prepared:
    """The rollouts of the prompts the loader just yielded, waiting for fit's generate call."""

    rollouts: Any
    #: Each rollout row's dataset row (``None`` when the dataset names none), to check fit's call.
    rows: np.ndarray | None


class RoundsRollout:
    """fit's rollout manager in a filter or pilot run: the step's generate call gets the rollouts prepared for it.

    Every other call (validation, steps before ``warmup_step``) is verl's manager's.
    """

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.prepared: Prepared | None = None

    def generate_sequences(self, prompts: Any) -> Any:
        prepared, self.prepared = self.prepared, None
        if prepared is None:
            return self.manager.generate_sequences(prompts)
        out = prepared.rollouts
        rows = prompts.non_tensor_batch.get(ROW_COLUMN)
        other_rows = (
            prepared.rows is not None and rows is not None and not np.array_equal(np.asarray(rows), prepared.rows)
        )
        if len(prompts) != len(out) or other_rows:
            raise RuntimeError(
                f"DataFlex prepared the rollouts of {len(out)} rows for the prompts its generation chose, but "
                f"verl's fit asked to generate {len(prompts)} other rows; this verl's RayPPOTrainer.fit does not "
                "generate the batch its train dataloader yields as verl 0.9.1 does (dataflex-verl supports its range)"
            )
        if "uid" in out.non_tensor_batch:  # rollouts that echo their prompts' columns: the uids fit assigned
            out.non_tensor_batch["uid"] = np.array(prompts.non_tensor_batch["uid"], dtype=object, copy=True)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)


class RoundsLoader:
    """fit's train dataloader in a filter or pilot run: each batch it yields is one step's chosen prompts.

    Its length and checkpoint state are the wrapped loader's (one pull per step, whatever the rounds).
    """

    def __init__(self, loader: Any, rounds: Any) -> None:
        """:param rounds: what builds each step (``step(batch_dict)``: the prompts fit trains, rollouts prepared)."""
        self.loader = loader
        self.rounds = rounds

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch_dict in self.loader:
            yield self.rounds.step(batch_dict)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def rollout_n(trainer: Any) -> int:
    """The rollouts fit trains per prompt (``actor_rollout_ref.rollout.n``)."""
    return int(trainer.config.actor_rollout_ref.rollout.n)


@dataclass
class Generated:
    """One step generated at fit's pull: the trained rollouts as fit lays them out, and the prompts fit trains."""

    rollouts: Any
    #: The prompts fit trains (verl's collated dict): what the loader yields.
    prompts: dict[str, Any]
    #: The first generate call's ``meta_info`` (its ``timing`` included): the step's rollouts get it.
    meta_info: dict[str, Any]
    #: What the session's step gets as ``generation`` (the admission rounds, the stages).
    generation: Any
    #: Seconds of the replicas' generate calls within it, where the mechanism times them.
    generate_s: float = 0.0


class PullGeneration:
    """A legacy trainer's generation of a step at fit's pull, for a mechanism whose seam generates the step (filter's
    rounds, pilot's stages): a subclass generates it (:meth:`generate_step`); this hands the result to fit.

    :param seam: the mounted mechanism's side of the seam (``session.seam(...)``).
    """

    def __init__(self, trainer: Any, rollout: RoundsRollout, seam: Any) -> None:
        self.trainer = trainer
        self.rollout = rollout
        self.seam = seam

    def step(self, batch_dict: dict[str, Any]) -> dict[str, Any]:
        """The prompts fit trains at this step, their rollouts prepared; ``batch_dict`` is the pulled batch."""
        trainer = self.trainer
        step = int(trainer.global_steps)
        if trainer.dataflex.idle(step) is not None:  # before warmup_step: fit generates its own batch
            return batch_dict
        began = time.perf_counter()
        made = self.generate_step(batch_dict, step)
        spent = time.perf_counter() - began
        meta = {k: v for k, v in made.meta_info.items() if k != "timing"}
        # fit's gen and step timers started after the generation: verl adds its own time to the rollout's timing
        made.rollouts.meta_info = {**meta, "timing": {**made.meta_info.get("timing", {}), "gen": spent, "step": spent}}
        rows = made.prompts.get(ROW_COLUMN)
        repeated = None if rows is None else np.repeat(np.asarray(rows), rollout_n(trainer))
        self.rollout.prepared = Prepared(made.rollouts, repeated)
        trainer.dataflex_generation = made.generation
        trainer.dataflex_metrics.update(self.timings(spent, made))
        return made.prompts

    def generate_step(self, batch_dict: dict[str, Any], step: int) -> Generated:
        """Generate step ``step`` from the pulled ``batch_dict`` through the seam."""
        raise NotImplementedError

    def timings(self, spent: float, made: Generated) -> dict[str, float]:
        """The step's time metrics, from the generation's wall time ``spent``."""
        raise NotImplementedError


class FilterRounds(PullGeneration):
    """One legacy trainer's generation rounds, for a mechanism that needs them (``mechanism: filter``)."""

    seam: GenerationRounds

    def generate_step(self, batch_dict: dict[str, Any], step: int) -> Generated:
        """Rounds from the pulled batch until enough groups are admitted; the chosen groups' rollouts."""
        admission = self.seam.rounds(prompt_count(batch_dict))
        done: list[Round] = []
        prompts = batch_dict
        while True:
            done.append(self.generate(prompts, step, admission))
            if not admission.needs_refill:
                break
            prompts = self.draw(self.seam.refill_rows(admission))  # as many prompts as the mechanism sizes the round
        chosen = admission.chosen()  # on_short: raise stops here, before fit generates anything
        picks = [torch.sort(one.prompt_of_group[keep]).values for one, keep in zip(done, chosen)]
        n = rollout_n(self.trainer)
        rollouts = [one.rollouts.select_idxs(consecutive_group_rows(rows, n).numpy()) for one, rows in zip(done, picks)]
        for part in rollouts:
            part.meta_info = {}
        chosen_prompts = concat_rows([select_rows(one.prompts, rows) for one, rows in zip(done, picks)])
        return Generated(type(rollouts[0]).concat(rollouts), chosen_prompts, done[0].rollouts.meta_info, admission)

    def timings(self, spent: float, made: Generated) -> dict[str, float]:
        return {"dataflex/filter/rounds_time_s": spent}

    def generate(self, batch_dict: dict[str, Any], step: int, admission: Any) -> Round:
        """One round as fit generates a step's batch; its groups admitted by the session."""
        uids = round_uids(prompt_count(batch_dict))
        n = rollout_n(self.trainer)
        counts = torch.full((len(uids),), n, dtype=torch.long)
        rollouts, data = roll_out(self.trainer, self.rollout.manager, batch_dict, uids, counts, step, "filter")
        read = dataproto_io.read_batch(data, self.trainer.dataflex.fields, producers=self.trainer.dataflex_field_hints)
        self.seam.admit(admission, read, step)
        return Round(batch_dict, rollouts, torch.argsort(group_index(uids)[0]))

    def draw(self, rows: list[int]) -> dict[str, Any]:
        """A refill round's prompts: dataset rows ``rows``, collated as fit's dataloader collates them."""
        loader = self.trainer.train_dataloader
        dataset = self.trainer.train_dataset
        return loader.collate_fn([dataset[int(i)] for i in rows])


def roll_out(
    trainer: Any,
    manager: Any,
    batch_dict: dict[str, Any],
    uids: np.ndarray,
    counts: torch.Tensor,
    step: int,
    mechanism: str,
    offsets: torch.Tensor | None = None,
) -> tuple[Any, Any]:
    """Prompt ``i`` of ``batch_dict`` rolled out ``counts[i]`` times under group ``uids[i]``, as fit generates a
    step's batch (its meta-info, generation batch and interleaved repetition: rollouts of a prompt consecutive).

    :param offsets: per prompt, the rollouts its group already has this step (a later stage's): each generation
        row carries its number within the group from there in :data:`ROLLOUT_OFFSET` (an agent loop keying its
        sampling by the row's number then does not repeat an earlier stage's samples), removed from what returns.
    :returns: verl's rollouts, and those rows joined with their prompts' columns (``response_mask`` included).
    """
    from verl import DataProto
    from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
    from verl.trainer.ppo.ray_trainer import compute_response_mask

    rollout_config = trainer.config.actor_rollout_ref.rollout
    batch = DataProto.from_single_dict(batch_dict)
    batch.meta_info["temperature"] = rollout_config.temperature
    batch.non_tensor_batch["uid"] = uids
    gen_batch = trainer._get_gen_batch(batch)
    gen_batch.meta_info["global_steps"] = step
    rows = np.repeat(np.arange(len(batch)), torch.as_tensor(counts).numpy())
    requests = gen_batch.select_idxs(rows)
    if offsets is not None:
        requests.non_tensor_batch[ROLLOUT_OFFSET] = torch.as_tensor(offsets).numpy()[rows]
    # verl splits a call evenly over its agent loop workers: a round of any size is padded with copies of its first
    # rows, whose rollouts are dropped before anything reads them
    requests, pad = pad_dataproto_to_divisor(requests, len(getattr(manager, "agent_loop_workers", None) or [0]))
    rollouts = unpad_dataproto(manager.generate_sequences(requests), pad)
    rollouts.non_tensor_batch.pop(ROLLOUT_OFFSET, None)
    if REWARD_FIELD not in rollouts.batch.keys():
        raise ConfigError(
            f"mechanism {mechanism} on verl's legacy line admits by the rewards verl's reward loop streams with the "
            f"rollout ({REWARD_FIELD}), but this rollout returned none; run the reward model on a resource pool of "
            "its own (reward.reward_model.enable_resource_pool=true) or use a rule reward"
        )
    data = batch.select_idxs(rows).union(rollouts)
    if "response_mask" not in data.batch.keys():
        data.batch["response_mask"] = compute_response_mask(data)
    return rollouts, data


def round_uids(prompts: int) -> np.ndarray:
    """A round's group ids: unique to the round and sorted in prompt order. The session numbers groups in sorted
    ``uid`` order, so when a round admits more groups than the batch still needs, the ones trained are the first in
    prompt order (deterministic given the seed), not a pick by random ids."""
    tag = uuid.uuid4().hex
    return np.array([f"{tag}-{row:06d}" for row in range(prompts)], dtype=object)


@contextlib.contextmanager
def generating_at_pull(trainer: Any, kind: type, generation: type[PullGeneration]) -> Iterator[None]:
    """While inside (fit), ``trainer``'s dataloader and rollout manager generate each step through the seam ``kind``
    of the mounted mechanism (``generation`` does it), where it has one."""
    session = trainer.dataflex
    seam = None if session is None else session.seam(kind)
    if seam is None:
        yield
        return
    loader, manager = trainer.train_dataloader, trainer.async_rollout_manager
    rollout = RoundsRollout(manager)
    trainer.train_dataloader = RoundsLoader(loader, generation(trainer, rollout, seam))
    trainer.async_rollout_manager = rollout
    try:
        yield
    finally:
        trainer.train_dataloader, trainer.async_rollout_manager = loader, manager


def installed(trainer: Any) -> contextlib.AbstractContextManager[None]:
    """While inside (fit), ``trainer``'s dataloader and rollout manager run the generation rounds of a mechanism
    that needs them (the :class:`~dataflex_core.step.seams.GenerationRounds` seam)."""
    return generating_at_pull(trainer, GenerationRounds, FilterRounds)
