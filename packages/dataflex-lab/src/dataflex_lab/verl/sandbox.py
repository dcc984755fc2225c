"""A laptop-sized stand-in for a verl run: local Ray + TransferQueue, verl's real config and loss.

``dataflex-verl demo-step``, the host's tests and the benchmarks use it to drive verl's real
``_compute_advantage`` and ``ppo_loss`` on synthetic rollouts, without GPUs,
models or datasets. Nothing here runs during training.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: Fields a synthetic rollout carries into the queue (as the agent loop and old-log-prob step would).
ROLLOUT_FIELDS = ("prompts", "responses", "response_mask", "rm_scores", "old_log_probs", "entropy")


def verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose_config(overrides: Sequence[str] = (), dataflex: dict[str, Any] | None = None) -> Any:
    """verl's real ``ppo_trainer`` config with hydra ``overrides`` and an optional ``dataflex:`` block."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=list(overrides))
    if dataflex is not None:
        with open_dict(config):
            config.dataflex = OmegaConf.create(dataflex)
    return config


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress is not None:
        progress(message)


#: How many :func:`local_queue` contexts are open in this process (only the outermost starts and closes).
_open_queues = 0


@contextmanager
def local_queue(num_cpus: int = 4, progress: Callable[[str], None] | None = None) -> Iterator[None]:
    """Start a local Ray and TransferQueue, and close both on exit.

    TransferQueue's controller and two storage units each ask for one CPU, so
    Ray needs ``num_cpus >= 4`` (it hangs with 2) whatever the machine has.
    Inside another ``local_queue`` of this process it reuses that one, so test
    suites of several packages can each ask for a queue in one pytest run.
    """
    global _open_queues
    if _open_queues:
        _open_queues += 1
        try:
            yield
        finally:
            _open_queues -= 1
        return
    import ray
    import transfer_queue as tq

    started_ray = not ray.is_initialized()
    start = time.perf_counter()
    if started_ray:
        _say(progress, f"starting a local Ray (num_cpus={num_cpus}) ...")
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        _say(progress, f"Ray is up after {time.perf_counter() - start:.1f}s; starting TransferQueue ...")
    tq.init()
    _say(progress, f"TransferQueue is up after {time.perf_counter() - start:.1f}s")
    _open_queues = 1
    try:
        yield
    finally:
        _open_queues = 0
        tq.close()
        if started_ray:
            ray.shutdown()


@dataclass
class SyntheticRollout:
    """Keys, tags and fields of a GRPO-shaped batch, in the layout verl's agent loop writes."""

    keys: list[str]
    tags: list[dict[str, Any]]
    fields: Any  # TensorDict of jagged tensors plus ``uid``
    uids: list[str]


def synthetic_rollout(
    num_prompts: int = 8,
    n: int = 4,
    *,
    max_response_len: int = 32,
    prompt_len: int = 6,
    padding_rows: int = 0,
    values: bool = False,
    ref_log_prob: bool = False,
    rollout_log_probs: bool = True,
    seed: int = 0,
) -> SyntheticRollout:
    """``num_prompts`` groups of ``n`` responses with 0/1 rewards on the last token (the testing kit's
    :func:`~dataflex_lab.testing.batches.grpo_layout`), in the layout verl's agent loop writes.

    Padding rows are verl's ``upsample_batch_to_divisible_size``'s: a shared
    ``pad<hex>`` uid, a one-token response whose ``response_mask`` is zero, and
    the tag ``is_padding``. Uids are fresh for every call, so rollouts of
    different tests never share TransferQueue keys.
    """
    from tensordict import NonTensorStack, TensorDict

    from ..testing.batches import grpo_layout

    layout = grpo_layout(
        num_prompts,
        n,
        width=max_response_len,
        min_length=max(1, max_response_len // 4),
        padding_rows=padding_rows,
        uids=[uuid.uuid4().hex for _ in range(num_prompts)],
        pad_uid=f"pad{uuid.uuid4().hex}",
        seed=seed,
    )
    gen = torch.Generator().manual_seed(seed + 1)
    real, bs = layout.real_rows, len(layout.uid)
    lengths = layout.lengths.clamp(min=1)  # verl's padding rows have one (masked) response token

    def jagged(make: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
        return torch.nested.as_nested_tensor([make(i, int(lengths[i])) for i in range(bs)], layout=torch.jagged)

    def last_token(i: int, length: int) -> torch.Tensor:
        out = torch.zeros(length)
        out[-1] = layout.rewards[i]
        return out

    columns: dict[str, Any] = {
        "prompts": jagged(lambda i, length: torch.randint(3, 1000, (prompt_len,), generator=gen)),
        "responses": jagged(lambda i, length: torch.randint(3, 1000, (length,), generator=gen)),
        "response_mask": jagged(lambda i, length: torch.full((length,), int(i < real), dtype=torch.int64)),
        "rm_scores": jagged(last_token),
        "old_log_probs": jagged(lambda i, length: -torch.rand(length, generator=gen) * 2),
        "entropy": jagged(lambda i, length: torch.rand(length, generator=gen) * 3),
    }
    if rollout_log_probs:
        old = columns["old_log_probs"]
        columns["rollout_log_probs"] = torch.nested.as_nested_tensor(
            [row + 0.1 * torch.randn(row.shape, generator=gen) for row in old.unbind()], layout=torch.jagged
        )
    if values:
        columns["values"] = jagged(lambda i, length: torch.randn(length, generator=gen) * 0.1)
    if ref_log_prob:
        columns["ref_log_prob"] = jagged(lambda i, length: -torch.rand(length, generator=gen) * 2)
    columns["uid"] = NonTensorStack(*layout.uid)
    keys = [f"{layout.uid[i]}_{i % n if i < real else i - real}_0" for i in range(bs)]
    tags = [
        {"status": "finished", "response_len": int(lengths[i]), "is_padding": i >= real, "min_global_steps": 0}
        for i in range(bs)
    ]
    return SyntheticRollout(keys, tags, TensorDict(columns, batch_size=bs), layout.groups)


def put_rollout(rollout: SyntheticRollout, partition_id: str = "train") -> Any:
    """Write a synthetic rollout to TransferQueue; the meta verl's step would hand to ``_compute_advantage``."""
    import transfer_queue as tq

    return tq.kv_batch_put(keys=rollout.keys, partition_id=partition_id, fields=rollout.fields, tags=rollout.tags)


def clear(meta: Any) -> None:
    import transfer_queue as tq

    tq.kv_clear(keys=meta.keys, partition_id=meta.partition_id)


def dataset_overrides(path: str, batch_size: int, seed: int) -> list[str]:
    """Hydra overrides that make verl's dataloader read the parquet file ``path`` as is (no tokenising, no workers)."""
    return [
        f"data.train_files={path}",
        f"data.val_files={path}",
        f"data.train_batch_size={batch_size}",
        "data.filter_overlong_prompts=false",
        "data.dataloader_num_workers=0",
        f"data.seed={seed}",
    ]


def dataloader_trainer(config: Any) -> Any:
    """A ``dataflex_sync`` trainer with verl's real train dataloader (and DataFlex's sampler in it), at step 1.

    Enough for ``_next_train_batch`` and ``_compute_advantage``: no workers, no model.
    """
    import verl  # noqa: F401  (the verl.plugins entry point registers the trainers)
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = get_trainer_cls("dataflex_sync")(config)
    trainer.tokenizer = trainer.processor = None  # prompts are not tokenised when overlong filtering is off
    trainer._init_dataloader()
    trainer.global_steps = 1
    return trainer


def actor_config(config: Any) -> Any:
    """verl's frozen ``ActorConfig`` with the loss settings of ``config`` (enough for ``ppo_loss`` on CPU)."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    actor = config.actor_rollout_ref.actor
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode=actor.loss_agg_mode,
        clip_ratio=actor.clip_ratio,
        entropy_coeff=0.0,
        use_kl_loss=False,
        policy_loss=PolicyLossConfig(loss_mode=actor.policy_loss.loss_mode),
    )


#: Fields verl's ``ppo_loss`` reads from the actor's micro-batch.
LOSS_FIELDS = ("prompts", "responses", "response_mask", "old_log_probs", "advantages", "rollout_is_weights")


def current_log_probs(old_log_probs: torch.Tensor, prompt_lens: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """A jagged "model output" over prompt+response whose response part is ``old_log_probs`` perturbed.

    verl's ``no_padding_2_padding`` reads position ``t-1`` for response token
    ``t``, so the response log-probs sit one place left of the sequence end.
    """
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for old, prompt_len in zip(old_log_probs.unbind(), prompt_lens.tolist()):
        new = old + 0.3 * torch.randn(old.shape, generator=gen)
        rows.append(torch.cat([torch.zeros(prompt_len - 1), new, torch.zeros(1)]))
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def actor_loss(meta: Any, config: Any, *, seed: int = 1, weights: torch.Tensor | None = None) -> torch.Tensor:
    """verl's real ``ppo_loss`` on the fields the actor would receive for ``meta``.

    Like verl's dispatcher, it reads only fields listed in ``meta.fields``: a
    ``_compute_advantage`` that returned the wrong meta loses
    ``rollout_is_weights`` here exactly as it would in training.

    :param weights: optional padded ``(bs, L)`` weights to use instead of the queued ``rollout_is_weights``
        (``torch.ones`` reproduces the unweighted loss).
    """
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    fields = [name for name in LOSS_FIELDS if name in (meta.fields or ())]
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=fields)
    if weights is not None:
        from dataflex_verl.queue_io import padded_to_jagged

        data["rollout_is_weights"] = padded_to_jagged(weights.to(torch.float32), data["response_mask"].offsets())
    data = TensorDict({name: data[name] for name in data.keys()}, batch_size=len(meta))
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    prompt_lens = data["prompts"].offsets().diff()
    log_probs = current_log_probs(data["old_log_probs"], prompt_lens, seed=seed)
    loss, _ = ppo_loss(actor_config(config), {"log_probs": log_probs}, data)
    return loss.detach()


class LocalActorGroup:
    """Stands in for verl's actor worker group, whose FSDP workers need GPUs: it saves and loads a file.

    Everything else on verl's checkpoint path (folder layout, tracker file, ``data.pt``, resume resolution) is
    verl's own code.
    """

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "weights.txt").write_text(str(global_step))

    def load_checkpoint(self, local_path, del_local_after_load=False):
        self.loaded.append(Path(local_path, "weights.txt").read_text())


class KeyedRollouts:
    """Stands in for verl's rollout replicas (a model server needs weights and a GPU) on the legacy line.

    Each generation row gets a response and a 0/1 reward on its last token drawn from its key alone (the step,
    the prompt's ``index``, the row's number within its group: its place among the call's rows of its ``uid``
    plus the row's ``dataflex_rollout_offset``), as the CPU harness's keyed sampling does; every other column is
    echoed back, as verl's agent loop does.
    """

    def __init__(self, width: int = 4, vocab: int = 50) -> None:
        self.width, self.vocab = width, vocab

    def generate_sequences(self, prompts: Any) -> Any:
        import numpy as np
        from tensordict import TensorDict
        from verl import DataProto

        from dataflex_verl.legacy_rounds import ROLLOUT_OFFSET

        columns = prompts.non_tensor_batch
        index = np.asarray(columns["index"]).astype(np.int64)
        uid = np.asarray(columns["uid"])
        offset = np.asarray(columns.get(ROLLOUT_OFFSET, np.zeros(len(uid)))).astype(np.int64)
        step = int(prompts.meta_info.get("global_steps", 0))
        rows, scores = [], torch.zeros(len(uid), self.width)
        for i in range(len(uid)):
            number = int(offset[i]) + sum(1 for j in range(i) if uid[j] == uid[i])
            gen = torch.Generator().manual_seed(hash((step, int(index[i]), number)) % (2**62))
            rows.append(torch.randint(3, self.vocab, (self.width,), generator=gen))
            scores[i, -1] = float(torch.rand((), generator=gen) < 0.5)
        batch = {"responses": torch.stack(rows), "response_mask": torch.ones(len(uid), self.width, dtype=torch.int64),
                 "rm_scores": scores}  # fmt: skip
        echoed = {name: np.array(value, copy=True) for name, value in columns.items()}
        return DataProto(batch=TensorDict(batch, batch_size=[len(uid)]), non_tensor_batch=echoed)


def attach_workers(trainer: Any) -> Any:
    """``trainer`` with a :class:`LocalActorGroup` and a small ``StatefulDataLoader``: enough for verl's real
    ``_save_checkpoint`` and ``_load_checkpoint`` on the CPU."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    trainer.actor_rollout_wg = LocalActorGroup()
    trainer.train_dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
    return trainer


def print_progress(message: str) -> None:
    print(f"[dataflex-verl] {message}", file=sys.stderr, flush=True)
