"""Memoised step-time lookups for the engine's hot loop."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from koi.errors import InvalidInput
from koi.surrogate.replay._step import StepTime, StepTimeModel

__all__ = ["CachedStepModel", "StepCache", "StepFromMixed", "StepTuple", "UncachedStepModel"]

# (time_s, compute_s, memory_s, comm_s, bubble_s, overhead_s): tuples are what the engine's hot
# loop reads; StepTime objects are only built for outside callers.
StepTuple = tuple[float, float, float, float, float, float]
_Vec = tuple[float, float, float, float, float]
# A node of the affine cache: components at zero pairs/context, and their slopes.
_Node = tuple[float, ...]  # 5 components at p = c = 0, then their slopes in p, then in c


def _check(st: StepTime) -> StepTuple:
    t = st.time_s
    if not t > 0.0:
        # A zero-time iteration would let the engine spin forever at one instant.
        raise InvalidInput(f"step_model: an iteration must take > 0 s, got {st!r}")
    return (t, st.compute_s, st.memory_s, st.comm_s, st.bubble_s, st.overhead_s)


def _vec(st: StepTime) -> _Vec:
    return (st.compute_s, st.memory_s, st.comm_s, st.bubble_s, st.overhead_s)


def _lerp(a: _Node, b: _Node, w: float, wt: float) -> _Node:
    """``w * a + wt * b`` per component of two nodes, unrolled (a comprehension over
    ``zip`` costs four times as much on the cache's miss path; same floats)."""
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14 = a
    b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14 = b
    return (
        w * a0 + wt * b0,
        w * a1 + wt * b1,
        w * a2 + wt * b2,
        w * a3 + wt * b3,
        w * a4 + wt * b4,
        w * a5 + wt * b5,
        w * a6 + wt * b6,
        w * a7 + wt * b7,
        w * a8 + wt * b8,
        w * a9 + wt * b9,
        w * a10 + wt * b10,
        w * a11 + wt * b11,
        w * a12 + wt * b12,
        w * a13 + wt * b13,
        w * a14 + wt * b14,
    )


@runtime_checkable
class StepCache(StepTimeModel, Protocol):
    """What a replica asks for its iterations: a pure decode step and a mixed one, as
    :data:`StepTuple` (and, as any step model, :meth:`step`).  :class:`CachedStepModel` and
    :class:`UncachedStepModel` answer it; an engine given one as a replica's step model uses
    it as is."""

    def decode(self, seqs: int, context_tokens: float) -> StepTuple: ...

    def mixed(
        self, prefill_tokens: int, prefill_pairs: float, seqs: int, context_tokens: float
    ) -> StepTuple: ...


class StepFromMixed:
    """Base of a step cache: its :meth:`step` (the :class:`StepTimeModel` protocol) is its
    mixed step as a :class:`StepTime`."""

    __slots__ = ()

    def mixed(
        self, prefill_tokens: int, prefill_pairs: float, seqs: int, context_tokens: float
    ) -> StepTuple:
        raise NotImplementedError

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        t = self.mixed(prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens)
        return StepTime(compute_s=t[1], memory_s=t[2], comm_s=t[3], bubble_s=t[4], overhead_s=t[5])


class UncachedStepModel(StepFromMixed):
    """The same interface as :class:`CachedStepModel` without memoisation (stochastic models)."""

    __slots__ = ("model",)

    def __init__(self, model: StepTimeModel) -> None:
        self.model = model

    def decode(self, seqs: int, context_tokens: float) -> StepTuple:
        return self.mixed(0, 0.0, seqs, context_tokens)

    def mixed(
        self, prefill_tokens: int, prefill_pairs: float, seqs: int, context_tokens: float
    ) -> StepTuple:
        st = self.model.step(
            prefill_tokens=prefill_tokens,
            prefill_pairs=float(prefill_pairs),
            decode_seqs=seqs,
            decode_context_tokens=round(context_tokens),
        )
        return _check(st)


class CachedStepModel(StepFromMixed):
    r"""Memoised step times: exact in sequence counts, affine in pairs and context.

    With ``affine=True`` (the default) the cache relies on what attention costs physically:
    for a fixed number of prefill tokens :math:`t` and decode sequences :math:`n`, every
    :class:`StepTime` component is affine in the prefill query-key pairs :math:`p` and in the
    summed decode context :math:`c` (attention FLOPs grow with :math:`p`, KV reads with
    :math:`c`).  Each :math:`(t, n)` node costs three model calls — at :math:`(p, c) = (0, 0)`
    and one probe along each axis — and then answers any :math:`(p, c)` exactly:

    .. math:: s_j(t, p, n, c) = a_j(t, n) + p\,\alpha_j(t, n) + c\,\gamma_j(t, n).

    Pure decode steps are therefore exact.  In iterations with prefill, the prefill token count
    and the decode sequence count are interpolated bilinearly between nodes of a grid that
    holds every integer up to :math:`k = \lceil 1/r \rceil` and then
    :math:`\mathrm{round}(k (1 + r)^i)`, with :math:`r` = ``resolution``: exact for small
    counts, nodes :math:`r` (relative) apart above.  Components are interpolated
    and the step time is :math:`\max(s_{compute}, s_{memory}) + s_{comm} + s_{bubble} +
    s_{overhead}` of the result.

    With ``affine=False`` the model is evaluated per bucket of every input instead, for models
    that are not affine in context: bucket :math:`q(x) = \mathrm{round}(\ln(1 + x/f) /
    \ln(1 + r))` with :math:`f` = ``floor_tokens``, evaluated at
    :math:`f((1 + r)^q - 1)`, so each input is off by at most half a bucket.

    Share one instance across engines to share the cache (the surrogate replays many short
    engines over the same few models).  The wrapped model must be deterministic: a cache would
    freeze per-call noise.

    The nodes interpolated between grid nodes are keyed by exact prefill token counts, so over
    a long replay they would grow without bound; at most ``2 · interp_limit`` are kept (all
    dropped when that fills) and recomputed from the grid when asked again: the same floats.
    """

    __slots__ = (
        "_br",
        "_decode",
        "_f",
        "_interp",
        "_interp_cap",
        "_inv",
        "_k",
        "_log",
        "_mixed",
        "_nodes",
        "_parts",
        "_rows",
        "affine",
        "model",
    )

    def __init__(
        self,
        model: StepTimeModel,
        *,
        resolution: float = 0.05,
        floor_tokens: float = 64.0,
        affine: bool = True,
        interp_limit: int = 4_096,
    ) -> None:
        if not (0.0 < resolution < 1.0):
            raise InvalidInput(f"resolution: must be in (0, 1), got {resolution!r}")
        if not (0.0 < floor_tokens < math.inf):
            raise InvalidInput(f"floor_tokens: must be > 0, got {floor_tokens!r}")
        if isinstance(interp_limit, bool) or not isinstance(interp_limit, int) or interp_limit < 1:
            raise InvalidInput(f"interp_limit: must be an integer >= 1, got {interp_limit!r}")
        self.model = model
        # A model may offer step_parts(t, p, n, c): the five fields of its step() as a tuple,
        # the same floats without building StepTime values (the simulated fleet's truth does).
        self._parts = getattr(model, "step_parts", None)
        self.affine = bool(affine)
        self._f = float(floor_tokens)
        self._log = math.log1p(resolution)
        self._inv = 1.0 / self._log
        self._k = math.ceil(1.0 / resolution)
        self._nodes: dict[tuple[int, int], _Node] = {}  # affine: (prefill tokens, seqs)
        # Nodes interpolated between them, keyed by exact counts: a plain dict (read once per
        # replayed step), started over past ``2 · interp_limit`` entries.
        self._interp: dict[tuple[int, int], _Node] = {}
        self._interp_cap = 2 * interp_limit
        self._rows: dict[tuple[int, int], _Node] = {}  # at grid prefill tokens, any seqs
        self._br: dict[int, tuple[int, int, float]] = {}
        self._decode: dict[tuple[int, int], StepTuple] = {}  # bucketed
        self._mixed: dict[tuple[int, int, int, int], StepTuple] = {}  # bucketed

    def __len__(self) -> int:
        """Cached entries (affine nodes or buckets)."""
        return len(self._nodes) + len(self._decode) + len(self._mixed)

    @property
    def footprint(self) -> int:
        """Every memoised entry, interpolated nodes and grid brackets included (a cache shared
        by many engines is bounded by this)."""
        return len(self) + len(self._interp) + len(self._rows) + len(self._br)

    # -- affine mode ----------------------------------------------------------------------

    def _node(self, t: int, n: int) -> _Node:
        if self._parts is not None:
            node = self._node_from_parts(t, n)
            if node is not None:
                self._nodes[(t, n)] = node
                return node
        step = self.model.step
        base = step(prefill_tokens=t, prefill_pairs=0.0, decode_seqs=n, decode_context_tokens=0)
        if base.time_s <= 0.0:
            _check(base)
        p0 = float(max(t, 1) * 2048)  # probes at a typical scale, exact if the model is affine
        c0 = max(n, 1) * 2048
        sp = step(prefill_tokens=t, prefill_pairs=p0, decode_seqs=n, decode_context_tokens=0)
        sc = step(prefill_tokens=t, prefill_pairs=0.0, decode_seqs=n, decode_context_tokens=c0)
        a = _vec(base)
        vp, vc = _vec(sp), _vec(sc)
        node = (
            *a,
            *((vp[j] - a[j]) / p0 for j in range(5)),
            *((vc[j] - a[j]) / c0 for j in range(5)),
        )
        self._nodes[(t, n)] = node
        return node

    def _node_from_parts(self, t: int, n: int) -> _Node | None:
        """:meth:`_node` through ``step_parts`` (``None`` when a value is not a valid step:
        the :class:`StepTime` path then raises)."""
        parts = self._parts
        assert parts is not None
        p0 = float(max(t, 1) * 2048)
        c0 = max(n, 1) * 2048
        a0, a1, a2, a3, a4 = parts(t, 0.0, n, 0)
        p = parts(t, p0, n, 0)
        c = parts(t, 0.0, n, c0)
        for x in (a0, a1, a2, a3, a4, *p, *c):
            if not 0.0 <= x < math.inf:
                return None
        if not (a0 if a0 > a1 else a1) + a2 + a3 + a4 > 0.0:
            return None
        return (
            a0,
            a1,
            a2,
            a3,
            a4,
            (p[0] - a0) / p0,
            (p[1] - a1) / p0,
            (p[2] - a2) / p0,
            (p[3] - a3) / p0,
            (p[4] - a4) / p0,
            (c[0] - a0) / c0,
            (c[1] - a1) / c0,
            (c[2] - a2) / c0,
            (c[3] - a3) / c0,
            (c[4] - a4) / c0,
        )

    def _bracket(self, x: int) -> tuple[int, int, float]:
        """Grid nodes ``lo <= x <= hi`` around ``x`` and the weight of ``hi``.

        The grid is every integer up to ``k = ceil(1 / resolution)``, then
        ``round(k (1 + resolution)^i)``: exact for small counts, ``resolution`` apart above.
        """
        hit = self._br.get(x)
        if hit is not None:
            return hit
        k = self._k
        if x <= k:
            hit = (x, x, 0.0)
        else:
            lg = self._log
            i = int(math.log(x / k) * self._inv)
            lo = round(k * math.exp(i * lg))
            hi = round(k * math.exp((i + 1) * lg))
            while lo > x:  # the grid is rounded to integers: step onto the right cell
                i -= 1
                lo, hi = round(k * math.exp(i * lg)), lo
            while hi < x:
                i += 1
                lo, hi = hi, round(k * math.exp((i + 1) * lg))
            hit = (x, x, 0.0) if x in (lo, hi) else (lo, hi, (x - lo) / (hi - lo))
        self._br[x] = hit
        return hit

    def _affine_decode(self, n: int, c: float) -> StepTuple:
        """Pure decode: one node, exact."""
        nd = self._nodes.get((0, n)) or self._node(0, n)
        s0 = nd[0] + c * nd[10]
        s1 = nd[1] + c * nd[11]
        total = (s0 if s0 > s1 else s1) + nd[2] + c * nd[12] + nd[3] + c * nd[13] + nd[4]
        total += c * nd[14]
        if not total > 0.0:  # far outside the probed range the affine fit can go negative
            return self._exact(0, 0.0, n, c)
        return (total, s0, s1, nd[2] + c * nd[12], nd[3] + c * nd[13], nd[4] + c * nd[14])

    def _exact(self, t: int, p: float, n: int, c: float) -> StepTuple:
        """The model itself, where the affine cache cannot be trusted."""
        st = self.model.step(
            prefill_tokens=t, prefill_pairs=float(p), decode_seqs=n, decode_context_tokens=round(c)
        )
        return _check(st)

    def _affine(self, t: int, p: float, n: int, c: float) -> StepTuple:
        interp = self._interp
        g = interp.get((t, n))
        if g is None:
            if len(interp) >= self._interp_cap:
                interp.clear()  # a memo, not state: the same floats when recomputed
            g = interp[(t, n)] = self._between(t, n)
        s0 = g[0] + p * g[5] + c * g[10]
        s1 = g[1] + p * g[6] + c * g[11]
        s2 = g[2] + p * g[7] + c * g[12]
        s3 = g[3] + p * g[8] + c * g[13]
        s4 = g[4] + p * g[9] + c * g[14]
        total = (s0 if s0 > s1 else s1) + s2 + s3 + s4
        # Nodes and inputs are finite: "any component < 0" is min(...) < 0 without the call.
        if not total > 0.0 or s0 < 0.0 or s1 < 0.0 or s2 < 0.0 or s3 < 0.0 or s4 < 0.0:
            return self._exact(t, p, n, c)  # the interpolation left the model's valid range
        return (total, s0, s1, s2, s3, s4)

    def _between(self, t: int, n: int) -> _Node:
        """The node at ``(t, n)``: bilinear in (prefill tokens, decode seqs) between grid
        nodes, as linear in ``t`` between two rows interpolated in ``n`` (memoised by the
        caller: the same batch shapes recur all the time)."""
        t0, t1, wt = self._bracket(t)
        a = self._row(t0, n)
        if not wt:
            return a
        return _lerp(a, self._row(t1, n), 1.0 - wt, wt)

    def _row(self, t: int, n: int) -> _Node:
        """The node at grid ``t`` and any ``n``, linear in ``n`` between grid nodes."""
        hit = self._rows.get((t, n))
        if hit is None:
            n0, n1, wn = self._bracket(n)
            hit = self._nodes.get((t, n0)) or self._node(t, n0)
            if wn:
                hi = self._nodes.get((t, n1)) or self._node(t, n1)
                hit = _lerp(hit, hi, 1.0 - wn, wn)
            self._rows[(t, n)] = hit
        return hit

    # -- bucket mode ----------------------------------------------------------------------

    def _rep(self, q: int) -> float:
        return self._f * math.expm1(q * self._log)

    def _bucket_decode(self, seqs: int, context_tokens: float) -> StepTuple:
        b = int(math.log1p(context_tokens / self._f) * self._inv + 0.5)
        key = (seqs, b)
        hit = self._decode.get(key)
        if hit is None:
            st = self.model.step(
                prefill_tokens=0,
                prefill_pairs=0.0,
                decode_seqs=seqs,
                decode_context_tokens=round(self._rep(b)),
            )
            hit = self._decode[key] = _check(st)
        return hit

    def _bucket_mixed(
        self, prefill_tokens: int, prefill_pairs: float, seqs: int, context_tokens: float
    ) -> StepTuple:
        f = self._f
        inv = self._inv
        t = int(math.log1p(prefill_tokens / f) * inv + 0.5)
        p = int(math.log1p(prefill_pairs / f) * inv + 0.5)
        b = int(math.log1p(context_tokens / f) * inv + 0.5)
        key = (t, p, seqs, b)
        hit = self._mixed.get(key)
        if hit is None:
            st = self.model.step(
                prefill_tokens=max(1, round(self._rep(t))),
                prefill_pairs=self._rep(p),
                decode_seqs=seqs,
                decode_context_tokens=round(self._rep(b)),
            )
            hit = self._mixed[key] = _check(st)
        return hit

    # -- interface ------------------------------------------------------------------------

    def decode(self, seqs: int, context_tokens: float) -> StepTuple:
        """A pure decode iteration of ``seqs`` sequences with this summed context."""
        if self.affine:
            return self._affine_decode(seqs, context_tokens)
        return self._bucket_decode(seqs, context_tokens)

    def mixed(
        self, prefill_tokens: int, prefill_pairs: float, seqs: int, context_tokens: float
    ) -> StepTuple:
        """An iteration with ``prefill_tokens`` prompt tokens beside ``seqs`` decodes."""
        if self.affine:
            if prefill_tokens == 0:
                return self._affine_decode(seqs, context_tokens)
            return self._affine(prefill_tokens, prefill_pairs, seqs, context_tokens)
        if prefill_tokens == 0:
            return self._bucket_decode(seqs, context_tokens)
        return self._bucket_mixed(prefill_tokens, prefill_pairs, seqs, context_tokens)
