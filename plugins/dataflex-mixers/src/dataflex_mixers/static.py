"""``static``: fixed domain proportions.

The baseline every adaptive mixer is compared with, and the way to pin a
known-good recipe (e.g. 70% math, 30% code). It still checks the domain
context each step, so a misconfigured domain column fails the same way as
with the adaptive mixers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from dataflex_core import register_mixer

from .base import DomainMixer


@register_mixer("static")
class StaticMixer(DomainMixer):
    """Always the configured proportions.

    :param proportions: one non-negative number per domain, either a list in
        the order of ``dataflex.domains`` or a mapping ``{domain: share}``;
        normalised to sum to one. ``None`` (default) means uniform.
    """

    def __init__(self, proportions: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if proportions is not None and not isinstance(proportions, (list, tuple, Mapping)):
            raise ValueError(f"static: proportions must be a list or a mapping, got {proportions!r}")
        self.proportions = proportions

    def initial_proportions(self, num_domains: int) -> torch.Tensor:
        spec = self.proportions
        if spec is None:
            return super().initial_proportions(num_domains)
        if isinstance(spec, Mapping):
            unknown = sorted(set(map(str, spec)) - set(self.domains))
            missing = [d for d in self.domains if d not in {str(k) for k in spec}]
            if unknown or missing:
                raise ValueError(
                    f"static: proportions name domains {sorted(map(str, spec))} but dataflex.domains is "
                    f"{self.domains} (unknown: {unknown}, missing: {missing})"
                )
            values = [float({str(k): v for k, v in spec.items()}[d]) for d in self.domains]
        else:
            values = [float(v) for v in spec]
            if len(values) != num_domains:
                raise ValueError(
                    f"static: {len(values)} proportions given for {num_domains} domains {self.domains}; "
                    "give one per domain, in the same order"
                )
        p = torch.tensor(values, dtype=torch.float64)
        if not torch.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
            raise ValueError(f"static: proportions must be finite, non-negative and not all zero, got {values}")
        return p / p.sum()

    def propose(self) -> torch.Tensor:
        return self.initial_proportions(len(self.domains))
