"""What every mixer here shares: domain bookkeeping, per-step signal, windowed history, state.

A mixer's input is one training step's batch: a score per row and the row's
domain (``ctx['domain_index']`` into ``ctx['domains']``). Rows are first
reduced to one value per domain *per step* (the mean over the domain's valid
rows), so a window of ``W`` means the last ``W`` training steps whatever the
batch size, and a domain sampled rarely counts as much per step as one
sampled often. Hosts call :meth:`DomainMixer.observe` on steps where the
proportions are not updated and ``act`` (observe, then propose) on update
steps; a host that only calls ``act`` gets the same statistics from fewer
steps.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import InvalidOutputError, Mixer, segment_count, segment_sum, valid_sample_mask


def _positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be an integer >= 1, got {value!r}")
    return value


def _positive_float(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{owner}: {name} must be a number > 0, got {value!r}")
    return float(value)


def _floor_share(owner: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{owner}: min_share must be in [0, 1), got {value!r}")
    return float(value)


class DomainMixer(Mixer):
    """Base of the mixers: checks the domain context and keeps the proportions in effect."""

    accepts_granularity = ("domain", "prompt", "response")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.domains: list[str] | None = None
        #: The proportions in effect (float64 ``(D,)``), ``None`` until the first update.
        self.mixture: torch.Tensor | None = None

    # -- domains -----------------------------------------------------------------

    def _bind_domains(self, domains: Any) -> int:
        if domains is None:
            raise ValueError(
                f"{self.describe()} needs ctx['domains'] (the configured domain names); "
                "set dataflex.domains in the config"
            )
        domains = [str(d) for d in domains]
        if not domains or len(set(domains)) != len(domains):
            raise ValueError(f"{self.describe()}: domains must be non-empty and unique, got {domains}")
        if self.domains is None:
            self.domains = domains
            self._on_bind(len(domains))
        elif domains != self.domains:
            raise ValueError(
                f"{self.describe()} was set up for domains {self.domains} but got {domains}; "
                "the domain list must not change during a run (or after a resume)"
            )
        return len(domains)

    def _on_bind(self, num_domains: int) -> None:
        """Allocate per-domain state once the number of domains is known."""

    def initial_proportions(self, num_domains: int) -> torch.Tensor:
        """Proportions before any signal was seen: uniform unless a mixer says otherwise."""
        return torch.full((num_domains,), 1.0 / num_domains, dtype=torch.float64)

    def current_proportions(self, domains: Any) -> torch.Tensor:
        """The proportions in effect (float32 ``(D,)``), without observing anything."""
        num_domains = self._bind_domains(domains)
        p = self.mixture if self.mixture is not None else self.initial_proportions(num_domains)
        return p.to(torch.float32)

    # -- per-step signal ------------------------------------------------------------

    def domain_signal(self, scores: Any, batch: Any, ctx: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's ``(mean signal per domain, valid rows per domain)``, float64 ``(D,)`` each.

        A domain with no valid row in the batch has count 0 (its mean is meaningless).
        """
        num_domains = self._bind_domains(ctx.get("domains"))
        valid = valid_sample_mask(batch)
        bs = valid.shape[0]
        index = ctx.get("domain_index")
        if not isinstance(index, torch.Tensor) or index.shape != (bs,) or index.is_floating_point():
            seen = tuple(index.shape) if isinstance(index, torch.Tensor) else type(index).__name__
            raise ValueError(
                f"{self.describe()} needs ctx['domain_index'] as an integer tensor of shape ({bs},), got {seen}"
            )
        index = index.to(valid.device).long()
        out_of_range = valid & ((index < 0) | (index >= num_domains))
        if out_of_range.any():
            row = int(out_of_range.nonzero()[0])
            raise ValueError(
                f"{self.describe()}: row {row} has domain_index {int(index[row])}, outside 0..{num_domains - 1} "
                f"for domains {self.domains}"
            )
        safe_index = torch.where(valid, index, torch.zeros_like(index))
        count = segment_count(safe_index, num_domains, valid).to(torch.float64)
        if not isinstance(scores, torch.Tensor):
            raise InvalidOutputError(f"{self.describe()} got scores of type {type(scores).__name__}, not a tensor")
        values = scores.detach().to(valid.device, torch.float64)
        per_domain = values.shape == (num_domains,) and (bs != num_domains or ctx.get("granularity") == "domain")
        if per_domain:
            mean = values
            bad = ~torch.isfinite(mean) & (count > 0)
        elif values.shape == (bs,):
            bad_rows = valid & ~torch.isfinite(values)
            if bad_rows.any():
                raise InvalidOutputError(
                    f"{self.describe()} got {int(bad_rows.sum())} non-finite score(s) on valid rows "
                    f"(first at row {int(bad_rows.nonzero()[0])})"
                )
            total = segment_sum(torch.where(valid, values, torch.zeros_like(values)), safe_index, num_domains, valid)
            mean = total / count.clamp(min=1)
            bad = torch.zeros(num_domains, dtype=torch.bool)
        else:
            raise InvalidOutputError(
                f"{self.describe()} needs scores of shape ({bs},) per row or ({num_domains},) per domain, "
                f"got {tuple(values.shape)}"
            )
        if bad.any():
            raise InvalidOutputError(f"{self.describe()} got non-finite per-domain scores {values.tolist()}")
        return mean.cpu(), count.cpu()

    def observe(self, scores: Any, batch: Any, **ctx: Any) -> None:
        """Record one step's signal without changing the proportions."""
        mean, count = self.domain_signal(scores, batch, ctx)
        self._record(ctx.get("step_id"), mean, count)

    def _record(self, step_id: Any, mean: torch.Tensor, count: torch.Tensor) -> None:
        """Fold one step's per-domain signal into the statistics (stateless mixers ignore it)."""

    def propose(self) -> torch.Tensor:
        """New proportions (float64 ``(D,)``) from the statistics recorded so far."""
        raise NotImplementedError

    def act(self, scores: Any, batch: Any, **ctx: Any) -> torch.Tensor:
        self.observe(scores, batch, **ctx)
        p = self.propose()
        if p.shape != (len(self.domains),) or not torch.isfinite(p).all() or (p < 0).any():
            raise InvalidOutputError(f"{self.describe()} proposed invalid proportions {p.tolist()}")
        self.mixture = p / p.sum()
        # Statistics stay on the CPU (they are tiny); the proportions go back on the scores' device.
        device = scores.device if isinstance(scores, torch.Tensor) else None
        return self.mixture.to(device=device, dtype=torch.float32)

    # -- checkpoint state ------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "domains": self.domains,
            "mixture": None if self.mixture is None else self.mixture.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        domains = state.get("domains")
        self.domains = None
        self.mixture = None
        if domains is not None:
            self._bind_domains(domains)
        if state.get("mixture") is not None:
            self.mixture = torch.tensor(state["mixture"], dtype=torch.float64)


class WindowedDomainMixer(DomainMixer):
    """A mixer whose statistics are the per-domain signal over the last ``window`` steps.

    :param window: training steps of history kept (``step_id - window < s <= step_id``).

    A domain not seen inside the window falls back to the last value it had
    (``last_mean``); a domain never seen has no estimate and each mixer says
    how it treats that. ``visits`` counts every valid row ever observed per
    domain (not windowed).
    """

    def __init__(self, window: int = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.window = _positive_int(type(self).__name__, "window", window)
        self._steps = torch.zeros(0, dtype=torch.long)
        self._means = torch.zeros(0, 0, dtype=torch.float64)
        self._seen = torch.zeros(0, 0, dtype=torch.bool)
        self.visits = torch.zeros(0, dtype=torch.float64)
        self.last_mean = torch.zeros(0, dtype=torch.float64)
        self.ever_seen = torch.zeros(0, dtype=torch.bool)
        self.steps_recorded = 0

    def _on_bind(self, num_domains: int) -> None:
        self._means = torch.zeros(0, num_domains, dtype=torch.float64)
        self._seen = torch.zeros(0, num_domains, dtype=torch.bool)
        self.visits = torch.zeros(num_domains, dtype=torch.float64)
        self.last_mean = torch.zeros(num_domains, dtype=torch.float64)
        self.ever_seen = torch.zeros(num_domains, dtype=torch.bool)

    def _record(self, step_id: Any, mean: torch.Tensor, count: torch.Tensor) -> None:
        step = self.steps_recorded if step_id is None else int(step_id)
        seen = count > 0
        self._steps = torch.cat([self._steps, torch.tensor([step])])
        self._means = torch.cat([self._means, torch.where(seen, mean, torch.zeros_like(mean)).unsqueeze(0)])
        self._seen = torch.cat([self._seen, seen.unsqueeze(0)])
        keep = self._steps > step - self.window
        self._steps, self._means, self._seen = self._steps[keep], self._means[keep], self._seen[keep]
        self.visits = self.visits + count
        self.last_mean = torch.where(seen, mean, self.last_mean)
        self.ever_seen = self.ever_seen | seen
        self.steps_recorded += 1

    def history(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(steps (H,), per-domain means (H, D), seen (H, D))`` inside the window."""
        return self._steps, self._means, self._seen

    def window_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(estimate, known)`` per domain: the mean over the window's steps, else ``last_mean``."""
        seen = self._seen.to(torch.float64)
        steps_seen = seen.sum(0)
        in_window = (self._means * seen).sum(0) / steps_seen.clamp(min=1)
        estimate = torch.where(steps_seen > 0, in_window, self.last_mean)
        return estimate, self.ever_seen.clone()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            steps=self._steps.tolist(),
            means=self._means.tolist(),
            seen=self._seen.tolist(),
            visits=self.visits.tolist(),
            last_mean=self.last_mean.tolist(),
            ever_seen=self.ever_seen.tolist(),
            steps_recorded=self.steps_recorded,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.domains is None:
            return
        d = len(self.domains)
        self._steps = torch.tensor(state["steps"], dtype=torch.long)
        self._means = torch.tensor(state["means"], dtype=torch.float64).reshape(-1, d)
        self._seen = torch.tensor(state["seen"], dtype=torch.bool).reshape(-1, d)
        self.visits = torch.tensor(state["visits"], dtype=torch.float64)
        self.last_mean = torch.tensor(state["last_mean"], dtype=torch.float64)
        self.ever_seen = torch.tensor(state["ever_seen"], dtype=torch.bool)
        self.steps_recorded = int(state["steps_recorded"])


def with_floor(p: torch.Tensor, min_share: float) -> torch.Tensor:
    """Mix ``p`` with the uniform distribution so every domain gets at least ``min_share``."""
    d = p.shape[0]
    if min_share * d >= 1.0:
        raise ValueError(f"min_share={min_share} times {d} domains must stay below 1")
    return (1.0 - min_share * d) * p + min_share


def softmax_over(values: torch.Tensor, temperature: float) -> torch.Tensor:
    """Boltzmann distribution; stable for values of any magnitude."""
    return torch.softmax(values / temperature, dim=0)
