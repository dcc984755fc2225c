"""A dataloader sampler that draws prompts from the whole dataset by domain proportions (``mechanism: mix``).

It is stateful and carries the mixer's state, so a host that checkpoints it resumes with the same mixture,
statistics and draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..contracts import check_proportions
from ..errors import ConfigError
from ..state_fields import INT64_MAX, StateFieldError, count, field, rows
from .blocks import BlockSampler, systematic_counts


class DomainMixtureSampler(BlockSampler):
    """Yields dataset indices whose domains follow the current proportions, one batch block at a time.

    :param domain_of_row: domain id (``0..D-1``) of every dataset row.
    :param domains: the domain names, for messages and metrics.
    :param batch_size: indices per block (the dataloader's batch size).
    :param proportions: initial proportions ``(D,)``.
    :param seed: seed of the sampler's own generator.
    :param mixer: optional component whose ``state_dict`` travels with the sampler's.
    """

    def __init__(
        self,
        domain_of_row: Sequence[int] | torch.Tensor,
        domains: Sequence[str],
        batch_size: int,
        proportions: torch.Tensor,
        seed: int = 0,
        mixer: Any = None,
    ) -> None:
        self.domains = list(domains)
        self.domain_of_row = torch.as_tensor(domain_of_row, dtype=torch.long)
        super().__init__(len(self.domain_of_row), batch_size, seed)
        self.mixer = mixer
        self.pools = [torch.nonzero(self.domain_of_row == d).flatten() for d in range(len(self.domains))]
        self.pool_sizes = torch.tensor([len(p) for p in self.pools], dtype=torch.long)
        self._perms = [self._shuffle(pool) for pool in self.pools]
        self._cursor = [0] * len(self.domains)
        self.drawn = torch.zeros(len(self.domains), dtype=torch.long)
        self.proportions = torch.zeros(len(self.domains), dtype=torch.float64)
        self.set_proportions(proportions)

    def _shuffle(self, pool: torch.Tensor) -> torch.Tensor:
        return pool[torch.randperm(len(pool), generator=self.generator)] if len(pool) else pool

    def set_proportions(self, proportions: torch.Tensor) -> None:
        """Use ``proportions`` from the next block on; they must put no mass on an empty domain."""
        p = check_proportions(
            torch.as_tensor(proportions, dtype=torch.float64),
            len(self.domains),
            owner=f"the mixture over {self.domains}",
            step=None,
        )
        starved = (p > 0) & (self.pool_sizes == 0)
        if starved.any():
            names = [self.domains[i] for i in starved.nonzero().flatten().tolist()]
            raise ConfigError(
                f"the mixture gives domains {names} a positive share, but the dataset has no rows for them; "
                "remove them from dataflex.domains or add their data"
            )
        self.proportions = p

    def _take(self, domain: int, count: int) -> torch.Tensor:
        out = []
        while count > 0:
            perm, cursor = self._perms[domain], self._cursor[domain]
            if cursor >= len(perm):
                self._perms[domain] = perm = self._shuffle(self.pools[domain])
                self._cursor[domain] = cursor = 0
            chunk = perm[cursor : cursor + count]
            out.append(chunk)
            self._cursor[domain] += len(chunk)
            count -= len(chunk)
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)

    def next_block(self) -> list[int]:
        """Draw the next block of ``batch_size`` dataset indices under the current proportions."""
        counts = systematic_counts(self.proportions, self.batch_size, self.generator)
        picks = torch.cat([self._take(d, int(c)) for d, c in enumerate(counts.tolist())])
        self.drawn += counts
        return picks[torch.randperm(len(picks), generator=self.generator)].tolist()

    # -- checkpoint state ------------------------------------------------------------

    def _per_domain(self, state: dict[str, Any], name: str) -> list[Any]:
        """``state[name]`` as a list of one value per domain."""
        value = field(state, name)
        if isinstance(value, torch.Tensor) and value.dim() == 1:
            value = value.tolist()
        if not isinstance(value, (list, tuple)) or len(value) != len(self.domains):
            raise StateFieldError(name, value, f"it holds one value per domain ({len(self.domains)}: {self.domains})")
        return list(value)

    def _checked_pass(self, state: dict[str, Any], domain: int) -> torch.Tensor:
        """Domain ``domain``'s saved pass: a permutation of the dataset rows of that domain."""
        name = f"perms[{domain}]"
        perm = rows({name: self._per_domain(state, "perms")[domain]}, name, self.population)
        pool = self.pools[domain]  # ascending (torch.nonzero)
        if len(perm) != len(pool) or not torch.equal(perm.sort().values, pool):
            raise StateFieldError(
                name, perm, f"it is a permutation of the {len(pool)} rows of domain {self.domains[domain]!r}"
            )
        return perm

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.block_state(),
            "perms": [p.clone() for p in self._perms],  # each domain's pass as a tensor: n ids in all, never lists
            "cursor": list(self._cursor),
            "drawn": self.drawn.tolist(),
            "proportions": self.proportions.tolist(),
            "mixer": self.mixer.state_dict() if self.mixer is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, each field checked before it is used (:mod:`dataflex_core.state_fields`): a
        checkpoint over another dataset is refused naming both sizes."""
        self.load_block_state(state)
        perms = [self._checked_pass(state, d) for d in range(len(self.domains))]
        cursor = self._per_domain(state, "cursor")
        for d, position in enumerate(cursor):
            count({f"cursor[{d}]": position}, f"cursor[{d}]", high=len(perms[d]))
        drawn = [count({f"drawn[{d}]": n}, f"drawn[{d}]") for d, n in enumerate(self._per_domain(state, "drawn"))]
        if sum(drawn) > INT64_MAX or sum(drawn) % self.batch_size:
            raise StateFieldError("drawn", drawn, f"a sampler draws whole blocks of {self.batch_size} prompts")
        proportions = self._per_domain(state, "proportions")
        if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in proportions):
            raise StateFieldError("proportions", proportions, "they are numbers, one per domain")
        values = torch.tensor(proportions, dtype=torch.float64)
        if not bool(torch.isfinite(values).all()) or bool((values < 0).any()) or float(values.sum()) <= 0:
            raise StateFieldError("proportions", proportions, "they are finite, never negative, and not all zero")
        self._perms, self._cursor = perms, list(cursor)
        self.drawn = torch.tensor(drawn, dtype=torch.long)
        self.set_proportions(values)
        if self.mixer is not None and state.get("mixer") is not None:
            self.mixer.load_state_dict(state["mixer"])
