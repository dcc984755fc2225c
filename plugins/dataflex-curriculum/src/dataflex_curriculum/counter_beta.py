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

Rows go in chunks of ``_CHUNK`` (temporaries the allocator reuses and the cache holds: at 1M rows,
dozens of dataset-sized arrays cost more in page faults than in arithmetic), and the rows a gamma
rejected are redrawn together after the last chunk. The hashing, the masks and the arithmetic are
numpy's (IEEE: the same bits wherever a row sits); every transcendental is torch's vectorised float64
one (a third of numpy's time here), whose result does not depend on the row's position in the array or
on the thread count (a test holds both), so a candidate's draw equals its draw over the whole dataset. A
different CPU type may round a transcendental differently in the last bit.
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
#: Rows per pass (1 MiB per float64 temporary).
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


# -- torch's vectorised transcendentals, in place on numpy arrays: one implementation for every row --------------


def _log(x: np.ndarray) -> np.ndarray:
    torch.from_numpy(x).log_()
    return x


def _exp(x: np.ndarray) -> np.ndarray:
    torch.from_numpy(x).exp_()
    return x


def _one_minus_exp(x: np.ndarray) -> np.ndarray:
    """``1 - e^x`` as ``-expm1(x)``: full precision near 0."""
    torch.from_numpy(x).expm1_().neg_()
    return x


class CounterStreams:
    """The uniforms of some rows at ``base`` (:func:`stream_base` of ``(seed, step)``): counter ``j`` of row ``i``
    is SplitMix64's output at position ``i`` of stream ``j``, whose start is itself a hash of ``(seed, step, j)``.

    :param positions: each row times the golden gamma (uint64; :meth:`of_rows`).
    """

    def __init__(self, base: int, positions: np.ndarray) -> None:
        self.base = base
        self.positions = positions

    @classmethod
    def of_rows(cls, base: int, rows: np.ndarray) -> CounterStreams:
        with np.errstate(over="ignore"):
            return cls(base, rows.astype(np.uint64) * np.uint64(_GOLDEN))

    def subset(self, index: np.ndarray) -> CounterStreams:
        """The streams of the rows ``index`` (indices into these rows)."""
        return CounterStreams(self.base, self.positions[index])

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

    def uniform(self, counter: int) -> np.ndarray:
        """A uniform in (0, 1) per row from the top 53 bits (float64, never 0 or 1)."""
        bits = self.bits(counter)
        return _open(np.right_shift(bits, np.uint64(11), out=bits), 53)

    def uniform_pair(self, counter: int) -> tuple[np.ndarray, np.ndarray]:
        """Two uniforms in (0, 1) per row from the top and the bottom 32 bits of one hash."""
        bits = self.bits(counter)
        high = _open(bits >> np.uint64(32), 32)
        return high, _open(np.bitwise_and(bits, np.uint64(0xFFFFFFFF), out=bits), 32)


def _open(integers: np.ndarray, width: int) -> np.ndarray:
    """``(k + 1/2) / 2^width`` for ``width``-bit integers ``k``: uniform in (0, 1), never 0 or 1."""
    u = integers.view(np.int64).astype(np.float64)  # below 2^53: exact, and int64 converts faster than uint64
    u += 0.5
    u *= 2.0**-width
    return u


def _radius(streams: CounterStreams, counter: int) -> np.ndarray:
    """Box-Muller's radius ``sqrt(-2 log U)``."""
    r = _log(streams.uniform(counter))
    r *= -2.0
    return np.sqrt(r, out=r)


def _normal_pair(streams: CounterStreams) -> tuple[np.ndarray, np.ndarray]:
    """Two independent standard normals per row (Box-Muller's ``r cos``, ``r sin``)."""
    r = _radius(streams, _FIRST)
    theta = streams.uniform_pair(_ANGLE)[0]
    theta *= 2.0 * np.pi
    first = torch.cos(torch.from_numpy(theta)).numpy()
    first *= r
    torch.from_numpy(theta).sin_()
    theta *= r
    return first, theta


def _normal_and_uniform(streams: CounterStreams, counter: int) -> tuple[np.ndarray, np.ndarray]:
    """One standard normal and one uniform per row (the angle's hash gives the uniform its low 32 bits)."""
    r = _radius(streams, counter)
    theta, uniform = streams.uniform_pair(counter + 1)
    theta *= 2.0 * np.pi
    torch.from_numpy(theta).cos_()
    theta *= r
    return theta, uniform


def _gamma_constants(shape: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Marsaglia-Tsang's ``d = a - 1/3`` and ``c = 1 / sqrt(9 d)``, ``a`` the shape (``shape + 1`` below 1)."""
    d = shape - 1.0 / 3.0
    boosted = shape < 1.0
    if boosted.any():
        d[boosted] += 1.0
    c = np.sqrt(d * 9.0)
    return d, np.divide(1.0, c, out=c)


def _candidate(normal: np.ndarray, uniform: np.ndarray, d: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Marsaglia-Tsang's candidate ``d v``, ``v = (1 + c x)^3``, and whether it is accepted: the squeeze
    ``u < 1 - 0.0331 x^4``, then ``v > 0`` and the logarithmic test for the few rows the squeeze leaves (every
    row with ``v <= 0`` among them: there ``x^4 >= 81 d^2 >= 36``, as ``d >= 2/3``). ``normal`` is consumed."""
    t = c * normal
    t += 1.0
    v = t * t
    v *= t
    x2 = np.multiply(normal, normal, out=normal)
    bound = x2 * x2
    bound *= -_SQUEEZE
    bound += 1.0
    ok = uniform < bound
    hard = np.flatnonzero(~ok)
    if len(hard):
        dh, vh = d[hard], v[hard]
        positive = vh > 0
        log_v = _log(np.where(positive, vh, 1.0))
        ok[hard] = positive & (_log(uniform[hard]) < 0.5 * x2[hard] + dh - dh * vh + dh * log_v)
    v *= d
    return v, ok


def _first_round(
    a: np.ndarray, b: np.ndarray, streams: CounterStreams
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X, Y, X accepted, Y accepted)``: one Box-Muller pair gives both gammas their normal, one hash both their
    acceptance uniforms."""
    (da, ca), (db, cb) = _gamma_constants(a), _gamma_constants(b)
    nx, ny = _normal_pair(streams)
    ux, uy = streams.uniform_pair(_ACCEPT)
    x, ok_x = _candidate(nx, ux, da, ca)
    y, ok_y = _candidate(ny, uy, db, cb)
    return x, y, ok_x, ok_y


def _retry(streams: CounterStreams, value: np.ndarray, pending: np.ndarray, shape: np.ndarray, g: int) -> None:
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


def _ratio(x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray, streams: CounterStreams) -> np.ndarray:
    """``X / (X + Y)`` (in ``x``), with the boosts ``U^(1/shape)`` of shapes below 1 applied in log space: no
    underflow to ``0 / 0`` at tiny shapes."""
    boost_a, boost_b = a < 1.0, b < 1.0
    small = np.flatnonzero(boost_a | boost_b)
    if len(small):
        log_ratio = _log(x[small]) - _log(y[small])
        for shape, boosted, counter, sign in ((a, boost_a, _BOOST, 1.0), (b, boost_b, _BOOST + 1, -1.0)):
            picked = boosted[small]
            rows = small[picked]
            log_ratio[picked] += sign * _log(streams.subset(rows).uniform(counter)) / shape[rows]
    y += x
    ratio = np.divide(x, y, out=x)
    if len(small):
        # the logistic function 1 / (1 + e^-z)
        np.negative(log_ratio, out=log_ratio)
        ratio[small] = 1.0 / (1.0 + _exp(log_ratio))
    return ratio


def _inverse_cdf(a: np.ndarray, b: np.ndarray, streams: CounterStreams) -> np.ndarray:
    """``Beta(a, 1) = U^(1/a)`` and ``Beta(1, b) = 1 - U^(1/b)`` from one uniform ``U``; ``Beta(1, 1)`` is ``U``
    itself, no logarithm (and so is any row with neither shape 1: the caller draws those by gammas)."""
    u = streams.uniform(_FIRST)
    a_one, b_one = a == 1.0, b == 1.0
    for reflect, power, rule in ((False, a, b_one & ~a_one), (True, b, a_one & ~b_one)):
        if rule.all():
            u = _log(u)
            u /= power
            return _one_minus_exp(u) if reflect else _exp(u)
        rows = np.flatnonzero(rule)
        if len(rows):
            z = _log(u[rows])
            z /= power[rows]
            u[rows] = _one_minus_exp(z) if reflect else _exp(z)
    return u


@dataclass
class _Rejected:
    """Rows of a chunk whose first round rejected a gamma: their index in the draw and the first round's values."""

    index: np.ndarray
    x: np.ndarray
    y: np.ndarray
    ok_x: np.ndarray
    ok_y: np.ndarray


def _draw_chunk(out: np.ndarray, a: np.ndarray, b: np.ndarray, streams: CounterStreams) -> _Rejected | None:
    """Write one chunk's draws into ``out`` (a view), each row by the cheapest exact rule its shapes allow; the
    rows a gamma rejected are returned, to be redrawn with every chunk's together (:func:`_redraw`)."""
    one = (a == 1.0) | (b == 1.0)
    gamma_rows = None
    if one.any():
        # every row by the inverse CDF (a row with neither shape 1 gets U: overwritten below), no gather of them
        out[:] = _inverse_cdf(a, b, streams)
        if one.all():
            return None
        gamma_rows = np.flatnonzero(~one)
        a, b, streams = a[gamma_rows], b[gamma_rows], streams.subset(gamma_rows)
    x, y, ok_x, ok_y = _first_round(a, b, streams)
    late = np.flatnonzero(~(ok_x & ok_y))
    rejected = _Rejected(late, x[late], y[late], ok_x[late], ok_y[late]) if len(late) else None
    ratio = _ratio(x, y, a, b, streams)  # the rejected rows' values are overwritten by _redraw
    if gamma_rows is None:
        out[:] = ratio
    else:
        out[gamma_rows] = ratio
        if rejected is not None:
            rejected.index = gamma_rows[late]
    return rejected


def _redraw(out: np.ndarray, a: np.ndarray, b: np.ndarray, streams: CounterStreams, rejected: list[_Rejected]) -> None:
    """Finish the rows whose first round rejected a gamma (2-5 % of them), all chunks' at once."""
    index = np.concatenate([r.index for r in rejected])
    x, y = np.concatenate([r.x for r in rejected]), np.concatenate([r.y for r in rejected])
    ra, rb, streams = a[index], b[index], streams.subset(index)
    for value, ok, shape, g in ((x, [r.ok_x for r in rejected], ra, 0), (y, [r.ok_y for r in rejected], rb, 1)):
        pending = np.flatnonzero(~np.concatenate(ok))
        if len(pending):
            _retry(streams, value, pending, shape[pending], g)
    out[index] = _ratio(x, y, ra, rb, streams)


def beta_draws(alpha: torch.Tensor, beta: torch.Tensor, seed: int, step: int, rows: torch.Tensor) -> torch.Tensor:
    """One ``Beta(alpha_i, beta_i)`` draw per row (float64, CPU), a function of ``(seed, step, rows[i])`` and the
    shapes alone; shapes must be > 0."""
    a = alpha.detach().to("cpu", torch.float64).numpy()  # read only: may be the scorer's own column
    b = beta.detach().to("cpu", torch.float64).numpy()
    streams = CounterStreams.of_rows(stream_base(seed, step), rows.detach().to("cpu", torch.long).numpy())
    out = np.empty(len(a))
    rejected: list[_Rejected] = []
    for start in range(0, len(a), _CHUNK):
        chunk = slice(start, start + _CHUNK)
        late = _draw_chunk(out[chunk], a[chunk], b[chunk], CounterStreams(streams.base, streams.positions[chunk]))
        if late is not None:
            late.index += start
            rejected.append(late)
    if rejected:
        _redraw(out, a, b, streams, rejected)
    return torch.from_numpy(out)
