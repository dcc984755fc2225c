"""A rollout backend for verl's v1 agent loop that generates with the HF model on the CPU.

verl 0.9 ships server backends for vLLM, SGLang and TensorRT-LLM only, all
GPU-bound. The v1 agent loop talks to a server actor through an async
``generate(request_id, prompt_ids, sampling_params, ...) -> TokenOutput``; this
module provides that actor (:class:`CpuGenerateServer`), the replica that
launches it (:class:`CpuRolloutReplica`, registered through verl's public
``RolloutReplicaRegistry``) and the adapter in the trainer's worker that
forwards the actor's weights to it after each update (:class:`CpuServerAdapter`).

Generation is deterministic per sample: a request carrying a ``sample_key``
(the harness's agent loop sends ``"<step>:<prompt index>:<sample index>"``)
samples with a generator seeded from the rollout seed and that key, so two
runs with the same seed draw the same responses whatever order requests
arrive in.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from collections.abc import AsyncIterable, Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from .names import ROLLOUT_NAME, server_actor_name

logger = logging.getLogger("dataflex_lab.verl.cpu_loop")


def request_seed(base_seed: int, sample_key: str) -> int:
    """A 63-bit seed from the rollout seed and a sample's key (stable across processes and runs)."""
    digest = hashlib.blake2b(f"{base_seed}|{sample_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``logits`` (V,) with tokens outside top-k / the top-p nucleus set to -inf (no-op for k<=0, p>=1)."""
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # mass before the token already exceeds top_p
        logits = logits.masked_fill(torch.zeros_like(outside).scatter(0, order, outside), float("-inf"))
    return logits


class CpuGenerateServer:
    """Holds an HF causal LM and samples responses token by token, with the log-probs of the sampled tokens.

    Runs as a Ray actor. Requests are served one at a time (the model is tiny
    and the machine has few cores); ``wake_up``/``sleep`` and the KV-cache
    methods verl calls around weight syncs have nothing to do on a CPU.
    """

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0, **_: Any) -> None:
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass

        torch.set_num_threads(1)
        model_config = omega_conf_to_dataclass(model_config)  # the replica passes the raw DictConfig
        self.response_length = int(config.response_length)
        self.base_seed = int(getattr(config, "seed", 0) or 0)
        self.model = AutoModelForCausalLM.from_pretrained(model_config.local_path, dtype=torch.float32)
        self.model.eval()
        self.eos_ids = self._eos_ids(model_config)
        self.global_steps: int | None = None
        self._fallback_counter = itertools.count()

    @staticmethod
    def _eos_ids(model_config: Any) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(model_config, "generation_config", None), getattr(model_config, "hf_config", None)):
            eos = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(eos, int):
                ids.add(eos)
            elif isinstance(eos, (list, tuple)):
                ids.update(int(e) for e in eos)
        tokenizer = getattr(model_config, "tokenizer", None)
        if tokenizer is not None and tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        return ids

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        sample_key: str | None = None,
        **_: Any,
    ) -> TokenOutput:
        temperature = float(sampling_params.get("temperature", 1.0))
        top_k = int(sampling_params.get("top_k", -1) or -1)
        top_p = float(sampling_params.get("top_p", 1.0))
        want_logprobs = bool(sampling_params.get("logprobs", False))
        max_new = int(
            sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens") or self.response_length
        )
        key = sample_key if sample_key is not None else f"unkeyed:{next(self._fallback_counter)}"
        generator = torch.Generator().manual_seed(request_seed(self.base_seed, key))

        with torch.no_grad():
            tokens, log_probs, stop_reason = self._sample(prompt_ids, max_new, temperature, top_k, top_p, generator)
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs if want_logprobs else None,
            stop_reason=stop_reason,
            extra_fields={"global_steps": self.global_steps},
        )

    def _sample(
        self,
        prompt_ids: list[int],
        max_new: int,
        temperature: float,
        top_k: int,
        top_p: float,
        generator: torch.Generator,
    ) -> tuple[list[int], list[float], str]:
        """Sample up to ``max_new`` tokens with a KV cache; ``(tokens, their log-probs, stop reason)``."""
        tokens: list[int] = []
        log_probs: list[float] = []
        past = None
        inputs = torch.tensor([prompt_ids], dtype=torch.long)
        for _ in range(max_new):
            out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            if temperature <= 0:  # greedy
                token = int(torch.argmax(logits))
                logp = float(torch.log_softmax(logits, -1)[token])
            else:
                scaled = filter_logits(logits / temperature, top_k, top_p)
                token = int(torch.multinomial(torch.softmax(scaled, -1), 1, generator=generator))
                logp = float(torch.log_softmax(scaled, -1)[token])
            tokens.append(token)
            log_probs.append(logp)
            if token in self.eos_ids:
                return tokens, log_probs, "completed"
            inputs = torch.tensor([[token]], dtype=torch.long)
        return tokens, log_probs, "length"

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Copy the trainer's weights in; returns the number of tensors loaded."""
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(
                f"weights from the trainer do not match the rollout model: missing {sorted(set(missing) - tied)}, "
                f"unexpected {sorted(unexpected)}"
            )
        self.global_steps = global_steps
        return len(state)

    # -- what verl calls around weight syncs and aborts: nothing to do on a CPU --------------------
    async def wake_up(self) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class CpuRolloutReplica(RolloutReplica):
    """Launches one :class:`CpuGenerateServer` actor per replica (hybrid mode: beside the trainer's workers)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        name = server_actor_name(self.replica_rank)
        _kill_stale_actor(name)
        server = (
            ray.remote(CpuGenerateServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        # construction errors (e.g. an unreadable model) surface here rather than at the first request
        await server.wake_up.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name


def _kill_stale_actor(name: str) -> None:
    """Remove a server left by an earlier run in the same Ray cluster (named actors outlive their owner briefly)."""
    try:
        stale = ray.get_actor(name)
    except ValueError:
        return
    ray.kill(stale, no_restart=True)
    for _ in range(100):
        try:
            ray.get_actor(name)
        except ValueError:
            return
        time.sleep(0.05)


class CpuServerAdapter(BaseRollout):
    """The trainer worker's side of the rollout: sends the actor's weights to the server after each update."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = max(1, self.config.tensor_model_parallel_size * self.config.data_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader = rank % world == 0
        self._server: Any = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"{ROLLOUT_NAME} rollout takes full named tensors, not {wire_format!r}")
        state = {}
        # verl's naive sync hands a generator; a checkpoint engine's receive side (separated trainers) an async one
        async for name, tensor in ensure_async_iterator(weights):
            if hasattr(tensor, "full_tensor"):  # a DTensor shard from FSDP2
                tensor = tensor.full_tensor()
            state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_leader:
            await self._server_handle().load_weights.remote(state, kwargs.get("global_steps"))
