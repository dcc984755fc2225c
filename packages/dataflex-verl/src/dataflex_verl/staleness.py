"""How many actor updates a separated trainer's rollouts lag behind the actor they train.

In verl's one-step-off trainer the rollouts of step ``s`` are generated while
step ``s - 1`` trains, with the weights synced before it: from the second step
on, the rewards and advantages a scorer sees at ``compute_advantage`` are of
responses sampled with weights one update older than the actor that is
trained on them. verl tags each sample with the ``global_steps`` of the weight
sync its rollout used (``non_tensor_batch["max_global_steps"]``; the rollout
server reports it), but the tag names the step that *issued* the sync, and
one-step-off's sync in step ``s`` sends the weights of step ``s - 1``. So
:class:`WeightVersions` counts the actor's updates itself and remembers which
update each tagged sync sent; a sample's staleness is the actor's updates now
minus its weights'.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Mean staleness of the step's samples, in actor updates (the metric every step reports).
STALENESS_METRIC = "dataflex/staleness/steps"
#: Largest staleness among the step's samples.
STALENESS_MAX_METRIC = "dataflex/staleness/max"
#: Fraction of the step's samples whose staleness comes from verl's sync tags (the rest: from the trainer's order).
STALENESS_TAGGED_METRIC = "dataflex/staleness/tagged"


class WeightVersions:
    """The actor's update count, and the update each weight sync (by verl's ``global_steps`` tag) sent."""

    def __init__(self) -> None:
        #: actor updates applied so far
        self.version = 0
        #: verl's tag of each sync -> the update count of the weights it sent
        self.synced: dict[int, int] = {}
        #: the sync tags in the order the syncs ran
        self.order: list[int] = []

    def resumed(self, completed_steps: int) -> None:
        """After verl restored ``global_step_N``: the actor has had N updates (one per completed step)."""
        self.version = int(completed_steps)

    def updated(self) -> None:
        self.version += 1

    def synced_at(self, tag: int) -> None:
        """A weight sync tagged ``tag`` (verl's ``global_steps`` when it ran) sent the current weights."""
        self.synced[int(tag)] = self.version
        self.order.append(int(tag))

    def metrics(self, tags: Sequence[int | None]) -> dict[str, float]:
        """Staleness of a batch whose samples carry verl's sync ``tags`` (``None``: the rollout reported none).

        An untagged sample is taken to come from the sync before the latest one: one-step-off syncs after
        awaiting the batch it trains next, so the latest sync's weights are still generating the next batch.
        """
        if not self.order or not tags:
            return {}
        fallback = self.synced[self.order[-2] if len(self.order) > 1 else self.order[-1]]
        known = [tag is not None and int(tag) in self.synced for tag in tags]
        lags = [self.version - (self.synced[int(tag)] if ok else fallback) for tag, ok in zip(tags, known)]
        return {
            STALENESS_METRIC: sum(lags) / len(lags),
            STALENESS_MAX_METRIC: float(max(lags)),
            STALENESS_TAGGED_METRIC: sum(known) / len(known),
        }
