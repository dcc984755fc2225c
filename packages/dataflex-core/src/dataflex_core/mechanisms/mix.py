"""``mechanism: mix``: per-domain signal after the advantage -> mixer -> which prompts are sampled next.

The scorer runs on the step's rollouts, each row mapped to its domain by the dataset column ``domain_key``;
the mixer observes each step and every ``update_step`` steps proposes proportions, which the host's train
sampler uses from its next block. The loss is the framework's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ..config import DataFlexPipeline
from ..contracts import check_proportions
from ..errors import ConfigError
from ..keys import Key, parse_keys
from ..step.calls import component_label
from ..step.context import StepContext
from ..step.dataset import dataset_column
from ..step.host import HostCapabilities
from ..step.mixture import DomainMixtureSampler
from ..step.outputs import checked_scores
from ..step.result import StepResult
from ..step.seams import Seam, TrainSampler
from .base import Mechanism, check_rollout_time

#: Keys of the ``dataflex:`` block that only ``mechanism: mix`` reads.
MIX_KEYS = {
    "domains": Key(
        list, "the domain names as they appear in the dataset column dataflex.domain_key", required=True,
        example="domains: [math, code]",
    ),
    "domain_key": Key(str, "the dataset column of each row's domain", default="domain", example="domain_key: domain"),
    "update_step": Key(int, "steps between the mixer's new proportions", default=1, low=1),
}  # fmt: skip


@dataclass(frozen=True)
class MixSettings:
    domains: list[str]
    domain_key: str
    update_step: int


def domain_ids(values: Any, domains: list[str], where: str) -> torch.Tensor:
    """Map domain names to ``0..D-1``; a name outside ``domains`` is an error naming it."""
    names = np.asarray(values, dtype=object).astype(str)
    lookup = {d: i for i, d in enumerate(domains)}
    uniq, inverse = np.unique(names, return_inverse=True)  # one lookup per distinct name, not per row
    unknown = [u for u in uniq.tolist() if u not in lookup]
    if unknown:
        raise ConfigError(
            f"{where} has domain value(s) {unknown[:10]} that are not in dataflex.domains={domains}; "
            "add them to dataflex.domains or filter those rows out of the dataset"
        )
    table = np.array([lookup[u] for u in uniq.tolist()], dtype=np.int64)
    return torch.from_numpy(table[inverse.reshape(-1)]) if len(names) else torch.zeros(0, dtype=torch.long)


def initial_proportions(mixer: Any, domains: list[str], owner: str | None = None) -> torch.Tensor:
    """The mixer's proportions before any update, float64 ``(D,)``, checked by the proportions contract."""
    owner = owner or f"mixer {mixer.name or type(mixer).__name__}"
    proposed = torch.as_tensor(mixer.current_proportions(domains))
    return check_proportions(proposed, len(domains), owner=f"{owner} (current_proportions)", step=None)


class Mix(Mechanism):
    """The mixer's proportions drive the train sampler; the loss stays the framework's."""

    name: ClassVar[str] = "mix"
    actuator_kind: ClassVar[str] = "mixer"
    keys: ClassVar[Mapping[str, Any]] = MIX_KEYS
    seams: ClassVar[tuple[type[Seam], ...]] = (TrainSampler,)
    fallback: ClassVar[str] = "keeping the current mixture"
    settings: MixSettings

    def parse(self, block: Mapping[str, Any]) -> MixSettings:
        return MixSettings(**parse_keys(MIX_KEYS, block, "dataflex", partial=True))

    def refusal(self, seam: type[Seam], host: HostCapabilities, reason: str) -> str:
        because = f" ({reason})" if reason else ""
        return (
            f"dataflex.mechanism=mix changes which prompts are sampled, but {host.name} cannot resample in "
            f"this configuration{because}; use mechanism reweight or select"
        )

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        check_rollout_time(pipeline, host, cls.name)

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        return list(dict.fromkeys([*pipeline.requires, self.settings.domain_key]))

    def dataset_columns(self, pipeline: DataFlexPipeline) -> list[str]:
        return [self.settings.domain_key]

    def train_sampler(self, step: StepContext, dataset: Any, batch_size: int, seed: int) -> DomainMixtureSampler:
        settings = self.settings
        key = settings.domain_key
        values = dataset_column(
            dataset, key, what=f"dataflex.domain_key={key!r}",
            fix="add a per-row domain column to the dataset or set dataflex.domain_key to an existing one",
        )  # fmt: skip
        rows = domain_ids(values, settings.domains, f"train dataset column {key!r}")
        mixer = step.pipeline.actuator
        proportions = initial_proportions(mixer, settings.domains, component_label(step.pipeline, "actuator"))
        return DomainMixtureSampler(rows, settings.domains, batch_size, proportions, seed=seed, mixer=mixer)

    def restored(self, sampler: DomainMixtureSampler | None, host: HostCapabilities) -> None:
        if sampler is not None and not host.checkpoints_sampler:
            # the framework rebuilt the sampler before the mixer's state came back: draw by the restored mixer
            sampler.set_proportions(initial_proportions(sampler.mixer, sampler.domains))

    def shared_state(self, sampler: DomainMixtureSampler | None) -> Any:
        return None if sampler is None else sampler.proportions.clone()

    def load_shared_state(self, sampler: DomainMixtureSampler | None, state: Any) -> None:
        if sampler is not None and state is not None:
            sampler.set_proportions(state)

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """Score the step's real rows, feed the mixer, and hand new proportions to the sampler on update steps."""
        sampler = step.sampler
        if sampler is None:
            raise RuntimeError(
                "mechanism mix drives the train sampler, but the host never built it (DataFlexSession.train_sampler)"
            )
        pipeline, settings = step.pipeline, self.settings
        batch, _ = step.components_batch(batch)
        domains = settings.domains
        index = domain_ids(batch.non_tensor_batch[settings.domain_key], domains, f"field {settings.domain_key!r}")
        ctx = {**step.ctx, "domains": domains, "domain_index": index, "granularity": pipeline.scorer.granularity}
        real = max(len(batch), 1)
        metrics = {
            f"dataflex/mix/batch_fraction/{name}": float((index == d).sum()) / real for d, name in enumerate(domains)
        }
        updates = (step_id - pipeline.warmup_step) % settings.update_step == 0
        scores = checked_scores(step.calls, batch, step_id, ctx)
        if updates:
            proposed = step.calls.call("actuator", "act", scores, batch, at_step=step_id, step_id=step_id, **ctx)
            owner = component_label(pipeline, "actuator")
            sampler.set_proportions(check_proportions(proposed, len(domains), owner=owner, step=step_id))
        else:
            step.calls.call("actuator", "observe", scores, batch, at_step=step_id, step_id=step_id, **ctx)
        metrics["dataflex/mix/updated"] = 1.0 if updates else 0.0
        for d, name in enumerate(domains):
            metrics[f"dataflex/mix/proportion/{name}"] = float(sampler.proportions[d])
        return StepResult(metrics)
