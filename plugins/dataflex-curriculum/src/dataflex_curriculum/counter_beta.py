"""Beta draws keyed by ``(seed, step, row)``: each prompt's draw computed for that prompt alone.

Thompson sampling draws every candidate's success rate from its Beta
posterior, and a prompt's draw must not depend on which other prompts are
candidates (the same seed gives the same curriculum however the candidates
fall). A sequential generator can promise that only by drawing for every
row of the dataset in order, O(dataset) per step. Here every uniform is a
counter-based hash: counter ``j`` at ``(seed, step)`` is its own SplitMix64
stream, read at position ``row``, so the draw for row ``i`` is a function of
``(seed, step, i, alpha_i, beta_i)``, computed in vectorised passes over the
rows asked for only: O(candidates).

The draw is exact for every shape, by the cheapest rule the shape allows:

- ``Beta(1, 1)`` (the default prior: every prompt never observed): one uniform ``U``;
- ``Beta(a, 1) = U^(1/a)`` and ``Beta(1, b) = 1 - U^(1/b)`` (inverse CDFs: under the default prior, prompts
  only ever solved or only ever failed);
- otherwise ``X / (X + Y)``, ``X ~ Gamma(a)``, ``Y ~ Gamma(b)`` by Marsaglia and Tsang's rejection: one
  Box-Muller pair gives both gammas their normal and one hash both their acceptance uniforms; the squeeze
  accepts about 98 % without a logarithm, and the rows rejected retry with their next counters. Shapes
  below 1 are boosted (``Gamma(a) = Gamma(a + 1) U^(1/a)``) and combined in log space, so tiny shapes do
  not underflow to ``0 / 0``.

The hashing is numpy's uint64 arithmetic, the rest torch's vectorised float64 maths, whose results do not
depend on a row's position in the array or the thread count (tests hold both); a different CPU type may
round a transcendental differently in the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK = (1 << 64) - 1
#: Counters: the first uniform (the radius, or the inverse CDF's), the angle, both acceptance uniforms, the two
#: boosts; rejection round ``r`` of gamma ``g`` (0 for ``X``, 1 for ``Y``) uses ``RETRY + 4 r + 2 g`` and ``+ 1``.
_FIRST, _ANGLE, _ACCEPT, _BOOST = 0, 1, 2, 3
_RETRY = 8
_MAX_ROUNDS = 300
_SQUEEZE = 0.0331
#: Rows drawn per pass: every temporary a block the allocator reuses and the cache holds, where whole-dataset
#: temporaries (dozens of 8 MB arrays at 1M rows) cost more in page faults than in arithmetic.
_CHUNK = 1 << 17


def _mix(z: int) -> int:
    """SplitMix64's output for state ``z`` (Python ints, for the streams' starts)."""
    z = (z + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def stream_base(seed: int, step: int) -> int:
    """The hash of ``(seed, step)`` every stream of the step starts from."""
    return _mix(_mix(int(seed) & _MASK) ^ (int(step) & _MASK))


class CounterStreams:
    """The uniforms of ``rows`` at ``base`` (:func:`stream_base` of ``(seed, step)``): counter ``j`` of row ``i`` is
    SplitMix64's output at position ``i`` of stream ``j``, whose start is itself a hash of ``(seed, step, j)``."""

    def __init__(self, base: int, positions: np.ndarray) -> None:
        self.base = base
        self.positions = positions

    @classmethod
    def of_rows(cls, base: int, rows: torch.Tensor) -> CounterStreams:
        with np.errstate(over="ignore"):
            return cls(base, rows.numpy().astype(np.uint64) * np.uint64(_GOLDEN))

    def subset(self, index: torch.Tensor) -> CounterStreams:
        """The streams of the rows ``index`` (indices into these rows)."""
        return CounterStreams(self.base, self.positions[index.numpy()])

    def bits(self, counter: int) -> np.ndarray:
        """64 random bits (uint64) per row."""
        start = np.uint64(_mix((self.base + (counter + 1) * _GOLDEN) & _MASK))
        with np.errstate(over="ignore"):
            z = self.positions + start
            tmp = np.right_shift(z, np.uint64(30))
            z ^= tmp
            z *= _MIX1
            np.right_shift(z, np.uint64(27), out=tmp)
            z ^= tmp
            z *= _MIX2
            np.right_shift(z, np.uint64(31), out=tmp)
            z ^= tmp
        return z

    def uniform(self, counter: int) -> torch.Tensor:
        """A uniform in (0, 1) per row from the top 53 bits (float64, never 0 or 1)."""
        bits = self.bits(counter)
        return _open(np.right_shift(bits, np.uint64(11), out=bits), 53)

    def uniform_pair(self, counter: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Two uniforms in (0, 1) per row from the top and the bottom 32 bits of one hash."""
        bits = self.bits(counter)
        high = _open(bits >> np.uint64(32), 32)
        return high, _open(np.bitwise_and(bits, np.uint64(0xFFFFFFFF), out=bits), 32)


def _open(integers: np.ndarray, width: int) -> torch.Tensor:
    """``(k + 1/2) / 2^width`` for ``width``-bit integers ``k``: uniform in (0, 1), never 0 or 1."""
    u = torch.from_numpy(integers.view(np.int64).astype(np.float64))  # < 2^53: exact, and int64 converts faster
    return u.add_(0.5).mul_(2.0**-width)


def _radius(streams: CounterStreams, counter: int) -> torch.Tensor:
    """Box-Muller's radius ``sqrt(-2 log U)``."""
    return streams.uniform(counter).log_().mul_(-2.0).sqrt_()


def _normal_pair(streams: CounterStreams) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent standard normals per row (Box-Muller's ``r cos``, ``r sin``)."""
    r = _radius(streams, _FIRST)
    theta = streams.uniform_pair(_ANGLE)[0].mul_(2.0 * torch.pi)
    return torch.cos(theta).mul_(r), theta.sin_().mul_(r)


def _normal_and_uniform(streams: CounterStreams, counter: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One standard normal and one uniform per row (the angle's hash gives the uniform its low 32 bits)."""
    r = _radius(streams, counter)
    theta, uniform = streams.uniform_pair(counter + 1)
    return theta.mul_(2.0 * torch.pi).cos_().mul_(r), uniform


def _gamma_constants(shape: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Marsaglia-Tsang's ``d = a - 1/3`` and ``c = 1 / sqrt(9 d)``, ``a`` the shape (``shape + 1`` below 1)."""
    d = shape - 1.0 / 3.0
    boosted = shape < 1.0
    if bool(boosted.any()):
        d[boosted] += 1.0
    return d, d.mul(9.0).rsqrt_()


def _candidate(
    normal: torch.Tensor, uniform: torch.Tensor, d: torch.Tensor, c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Marsaglia-Tsang's candidate ``d v``, ``v = (1 + c x)^3``, and whether it is accepted: the squeeze
    ``u < 1 - 0.0331 x^4``, then ``v > 0`` and the logarithmic test for the few rows the squeeze leaves (every
    row with ``v <= 0`` among them: there ``x^4 >= 81 d^2 >= 36``, as ``d >= 2/3``)."""
    t = torch.mul(c, normal).add_(1.0)
    v = t.square().mul_(t)
    x2 = normal.square_()
    ok = uniform < x2.square().mul_(-_SQUEEZE).add_(1.0)
    hard = (~ok).nonzero().reshape(-1)
    if len(hard):
        dh, vh = d[hard], v[hard]
        ok[hard] = (vh > 0) & (uniform[hard].log_() < 0.5 * x2[hard] + dh - dh * vh + dh * vh.log())
    return v.mul_(d), ok


def _first_round(
    a: torch.Tensor, b: torch.Tensor, streams: CounterStreams
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X, Y, X accepted, Y accepted)``: one Box-Muller pair gives both gammas their normal, one hash both their
    acceptance uniforms."""
    (da, ca), (db, cb) = _gamma_constants(a), _gamma_constants(b)
    nx, ny = _normal_pair(streams)
    ux, uy = streams.uniform_pair(_ACCEPT)
    x, ok_x = _candidate(nx, ux, da, ca)
    y, ok_y = _candidate(ny, uy, db, cb)
    return x, y, ok_x, ok_y


def _retry(streams: CounterStreams, value: torch.Tensor, pending: torch.Tensor, shape: torch.Tensor, g: int) -> None:
    """Redraw ``value[pending]`` (gamma ``g``: 0 ``X``, 1 ``Y``; ``shape`` the pending rows') with each row's next
    counters until each is accepted."""
    d, c = _gamma_constants(shape)
    for round_ in range(_MAX_ROUNDS):
        if not len(pending):
            return
        normal, uniform = _normal_and_uniform(streams.subset(pending), _RETRY + 4 * round_ + 2 * g)
        candidate, accepted = _candidate(normal, uniform, d, c)
        value[pending[accepted]] = candidate[accepted]
        kept = ~accepted
        pending, d, c = pending[kept], d[kept], c[kept]
    value[pending] = d  # not reached in practice (each round accepts > 95 %)


def _ratio(x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor, streams: CounterStreams) -> torch.Tensor:
    """``X / (X + Y)`` (in ``x``), with the boosts ``U^(1/shape)`` of shapes below 1 applied in log space: no
    underflow to ``0 / 0`` at tiny shapes."""
    boost_a, boost_b = a < 1.0, b < 1.0
    small = (boost_a | boost_b).nonzero().reshape(-1)
    if len(small):
        log_ratio = x[small].log_() - y[small].log_()
        for shape, boosted, counter, sign in ((a, boost_a, _BOOST, 1.0), (b, boost_b, _BOOST + 1, -1.0)):
            picked = boosted[small]
            rows = small[picked]
            log_ratio[picked] += sign * streams.subset(rows).uniform(counter).log_() / shape[rows]
    ratio = x.div_(y.add_(x))
    if len(small):
        ratio[small] = torch.sigmoid(log_ratio)
    return ratio


def _inverse_cdf(a: torch.Tensor, b: torch.Tensor, streams: CounterStreams) -> torch.Tensor:
    """``Beta(a, 1) = U^(1/a)`` and ``Beta(1, b) = 1 - U^(1/b)`` from one uniform ``U``; ``Beta(1, 1)`` is ``U``
    itself, no logarithm (and so is any row with neither shape 1: the caller draws those by gammas)."""
    u = streams.uniform(_FIRST)
    a_one, b_one = a == 1.0, b == 1.0
    for reflect, power, rule in ((False, a, b_one & ~a_one), (True, b, a_one & ~b_one)):
        if bool(rule.all()):
            z = u.log_().div_(power)
            return z.expm1_().neg_() if reflect else z.exp_()
        rows = rule.nonzero().reshape(-1)
        if len(rows):
            z = u.index_select(0, rows).log_().div_(power.index_select(0, rows))
            # 1 - U^(1/b) as -expm1(log U / b): full precision near 0
            u.index_copy_(0, rows, z.expm1_().neg_() if reflect else z.exp_())
    return u


@dataclass
class _Rejected:
    """Rows of a chunk whose first round rejected a gamma: their index in the draw and the first round's values."""

    index: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    ok_x: torch.Tensor
    ok_y: torch.Tensor


def _draw_chunk(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, streams: CounterStreams) -> _Rejected | None:
    """Write one chunk's draws into ``out`` (a view), each row by the cheapest exact rule its shapes allow; the
    rows a gamma rejected are returned, to be redrawn with every chunk's together (:func:`_redraw`)."""
    one = (a == 1.0) | (b == 1.0)
    gamma_rows = None
    if bool(one.any()):
        # every row by the inverse CDF (a row with neither shape 1 gets U: overwritten below), no gather of them
        out.copy_(_inverse_cdf(a, b, streams))
        if bool(one.all()):
            return None
        gamma_rows = (~one).nonzero().reshape(-1)
        a, b, streams = a.index_select(0, gamma_rows), b.index_select(0, gamma_rows), streams.subset(gamma_rows)
    x, y, ok_x, ok_y = _first_round(a, b, streams)
    late = (~(ok_x & ok_y)).nonzero().reshape(-1)
    rejected = _Rejected(late, x[late], y[late], ok_x[late], ok_y[late]) if len(late) else None
    ratio = _ratio(x, y, a, b, streams)  # the rejected rows' values are overwritten by _redraw
    if gamma_rows is None:
        out.copy_(ratio)
    else:
        out.index_copy_(0, gamma_rows, ratio)
        if rejected is not None:
            rejected.index = gamma_rows[late]
    return rejected


def _redraw(
    out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, streams: CounterStreams, rejected: list[_Rejected]
) -> None:
    """Finish the rows whose first round rejected a gamma (2-5 % of them), all chunks' at once."""
    index = torch.cat([r.index for r in rejected])
    x, y = torch.cat([r.x for r in rejected]), torch.cat([r.y for r in rejected])
    ra, rb, streams = a.index_select(0, index), b.index_select(0, index), streams.subset(index)
    for value, ok, shape, g in ((x, [r.ok_x for r in rejected], ra, 0), (y, [r.ok_y for r in rejected], rb, 1)):
        pending = (~torch.cat(ok)).nonzero().reshape(-1)
        if len(pending):
            _retry(streams, value, pending, shape.index_select(0, pending), g)
    out.index_copy_(0, index, _ratio(x, y, ra, rb, streams))


def beta_draws(alpha: torch.Tensor, beta: torch.Tensor, seed: int, step: int, rows: torch.Tensor) -> torch.Tensor:
    """One ``Beta(alpha_i, beta_i)`` draw per row (float64, CPU), a function of ``(seed, step, rows[i])`` and the
    shapes alone; shapes must be > 0."""
    a = alpha.detach().to("cpu", torch.float64)
    b = beta.detach().to("cpu", torch.float64)
    streams = CounterStreams.of_rows(stream_base(seed, step), rows.detach().to("cpu", torch.long))
    out = torch.empty(len(a), dtype=torch.float64)
    rejected: list[_Rejected] = []
    for start in range(0, len(a), _CHUNK):
        chunk = slice(start, start + _CHUNK)
        late = _draw_chunk(out[chunk], a[chunk], b[chunk], CounterStreams(streams.base, streams.positions[chunk]))
        if late is not None:
            late.index += start
            rejected.append(late)
    if rejected:
        _redraw(out, a, b, streams, rejected)
    return out
