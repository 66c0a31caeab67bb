"""One replica: continuous batching with chunked prefill, KV accounting and preemption.

Internal to the engine.  A replica advances in *blocks*: a block is either one iteration that
carries prefill tokens, or ``k`` pure-decode iterations whose batch cannot change before the
block ends (the block stops at the next finish and before the KV cache would overflow).  The
engine commits a block at its end time, or cuts it short when an arrival could join the batch.

Decode bookkeeping is O(1) per iteration: a decoding sequence that joined the decode set after
iteration ``J`` with ``g`` generated tokens holds ``input + g + (it - J)`` KV tokens at iteration
counter ``it``, so the summed context is ``sum(off) + n * it`` with ``off = input + g - J``, and
it finishes when ``it`` reaches ``J + output - g`` (a heap keyed by that counter).

Longer than most modules: admission, block planning, preemption, accounting and evacuation all
mutate the same slotted scheduler state in the replay's innermost loop (the same reason as
``_engine``); splitting them would cost attribute lookups per iteration.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

import attrs

from koi.errors import InvalidInput
from koi.surrogate.replay._cache import StepCache, StepTuple
from koi.surrogate.replay._prefix_cache import PrefixCache
from koi.surrogate.replay._step import StepTimeModel
from koi.types.validators import non_negative, positive_int

if TYPE_CHECKING:
    from koi.surrogate.replay._engine import ReplayEngine

__all__ = ["ReplicaSpec"]


def _step_model(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(getattr(value, "step", None)):
        raise InvalidInput(f"{attribute.name}: must have a step(...) method, got {value!r}")


@attrs.frozen
class ReplicaSpec:
    """One serving replica: its step-time model and its engine limits.

    ``kv_capacity_tokens`` is the KV cache size in tokens.  ``max_batch_size`` caps running
    sequences and ``max_batched_tokens`` the tokens of one iteration.  Like vLLM, a replica
    never runs more sequences than it has tokens per iteration, so the effective batch cap is
    ``min(max_batch_size, max_batched_tokens)``.

    ``preempt_stall_s`` (plus ``preempt_stall_s_per_token`` times the evicted sequence's
    context) is dead time the iteration after a preemption pays on top of the recompute:
    block-table churn and re-admission in a real engine.  Zero (the surrogate's default)
    leaves preemption as recompute only; the simulated fleet sets it to model overload
    collapse.

    ``mixed_prefill`` is the scheduling policy.  True (vLLM, TensorRT-LLM): decode tokens go
    first and chunked prefill slices fill the rest of the iteration.  False (SGLang's default,
    no mixed chunks): prefill first — while any prompt is waiting or half-done, an iteration
    carries prefill slices only and every decoding sequence pauses.

    ``chunk_admission`` is the KV admission policy.  False: a prompt is admitted only when its
    whole KV fits.  True (vLLM): a prompt is admitted when the slice scheduled this iteration
    fits, and each later slice claims its blocks when it is scheduled; when the cache runs out
    the newest sequence is preempted and recomputed, so prompts longer than the free cache
    evict each other and throughput collapses under overload.

    ``prefix_cache`` keeps the KV blocks of shared prompt prefixes (``Request.prefix``), as
    vLLM's automatic prefix caching and SGLang's radix cache do: a prefix is held in whole
    blocks of ``prefix_block_tokens``; while running requests use it, it is pinned (counted in
    the KV cache once, however many share it); when the last one leaves, it stays cached in the
    free part of the KV cache and is evicted least-recently-used when the running requests need
    the room.  A request whose prefix is held skips that part of its prefill.
    """

    step_model: StepTimeModel = attrs.field(validator=_step_model)
    kv_capacity_tokens: int = attrs.field(validator=positive_int)
    max_batch_size: int = attrs.field(validator=positive_int)
    max_batched_tokens: int = attrs.field(validator=positive_int)
    mixed_prefill: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    chunk_admission: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    preempt_stall_s: float = attrs.field(default=0.0, validator=non_negative)
    preempt_stall_s_per_token: float = attrs.field(default=0.0, validator=non_negative)
    prefix_cache: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    prefix_block_tokens: int = attrs.field(default=16, validator=positive_int)


class _Seq:
    """Mutable per-request state inside the engine."""

    __slots__ = (
        "arrival",
        "chunk",
        "done",
        "entered",
        "fed",
        "first",
        "gen",
        "hv",
        "id",
        "inp",
        "j",
        "off",
        "out",
        "pre",
        "ptok",
        "res",
        "sb",
        "target",
        "uid",
    )

    def __init__(
        self,
        uid: int,
        rid: int,
        arrival: float,
        inp: int,
        out: int,
        fed: bool,
        pre: int = -1,
        ptok: int = 0,
    ) -> None:
        self.uid = uid
        self.id = rid
        self.arrival = arrival
        self.entered = arrival  # when this engine got it (later for a handed-over request)
        self.inp = inp
        self.out = out
        self.fed = fed
        self.gen = 0  # output tokens generated (as of iteration j while decoding)
        self.target = inp  # prompt to (re)compute: input + tokens generated before a preemption
        self.done = 0  # prompt tokens already prefilled
        self.chunk = 0  # prompt tokens scheduled in the current iteration
        self.first = -1.0  # first-token time, -1 until it has one
        self.j = 0  # iteration counter when it joined the decode set
        self.off = 0  # input + gen - j while decoding
        self.hv = -1  # version of its live heap entry, -1 when not decoding
        self.res = 0  # KV tokens reserved while prefilling
        self.pre = pre  # shared prefix id (-1: none)
        self.ptok = ptok  # shared prefix tokens
        self.sb = 0  # prompt tokens held by its pinned prefix (not in its own KV)


class _Replica:
    """Scheduler state of one replica (see the module docstring).

    Field legend (short names: this is the replay's innermost loop):

    * limits — ``spec``; ``m`` the step-time model; ``cap`` KV capacity in tokens, ``adm_cap``
      what admissions may fill (the watermark kept free); ``maxb`` the batch cap, ``budget``
      tokens per iteration; ``mixed`` decode-first mixed batches (else prefill-first).
    * queues — ``waiting`` (arrived, not admitted; preempted ones go back to its head),
      ``running`` (admitted, in admission order), ``prefilling`` (admitted, prompt not done),
      ``heap`` (decoders keyed by the iteration they finish at); ``load`` is
      ``len(waiting) + len(running)``, kept as requests are routed in and finish or leave.
    * KV and decode accounting — ``it`` the iteration counter, ``n_dec`` decoding sequences,
      ``s_dec`` the sum of their offsets (their KV tokens are ``s_dec + n_dec * it``),
      ``used_pre`` KV tokens held by prefilling sequences and pinned prefixes.
    * prefix cache — ``pc`` the :class:`PrefixCache` (None when off); ``sb_dec`` the prefix
      tokens decoding sequences attend to but do not hold themselves.
    * the planned block (``p_*``) — ``p_on`` a block is in flight; ``p_s`` / ``p_e`` its start
      and end time; ``p_dt`` its step time and ``p_st`` the step's time breakdown; ``p_k`` its
      iterations; ``p_n`` its decoding sequences and ``p_run`` its running ones; ``p_kv`` the
      KV tokens it holds on average; ``p_pref`` it carries prefill; ``p_acc`` / ``p_kacc``
      how far (time, iterations) the engine has already accounted it.
    """

    __slots__ = (
        "adm_cap",
        "budget",
        "cap",
        "chunk_adm",
        "heap",
        "it",
        "load",
        "m",
        "maxb",
        "mixed",
        "n_dec",
        "p_acc",
        "p_dt",
        "p_e",
        "p_k",
        "p_kacc",
        "p_kv",
        "p_n",
        "p_on",
        "p_pref",
        "p_run",
        "p_s",
        "p_st",
        "pc",
        "prefilling",
        "running",
        "s_dec",
        "sb_dec",
        "serial",
        "spec",
        "stall",
        "used_pre",
        "waiting",
    )

    def __init__(
        self, spec: ReplicaSpec, model: StepCache, now: float, watermark: float, serial: int
    ) -> None:
        self.spec = spec
        self.serial = serial  # the engine's name for it in per-request telemetry
        self.m = model
        self.cap = spec.kv_capacity_tokens
        self.adm_cap = spec.kv_capacity_tokens * (1.0 - watermark)
        self.maxb = min(spec.max_batch_size, spec.max_batched_tokens)
        self.budget = spec.max_batched_tokens
        self.mixed = spec.mixed_prefill
        self.chunk_adm = spec.chunk_admission
        self.waiting: deque[_Seq] = deque()
        self.running: dict[int, _Seq] = {}  # admission order: the last one is preempted first
        self.prefilling: list[_Seq] = []
        self.heap: list[tuple[int, int, _Seq]] = []
        self.load = 0  # len(waiting) + len(running), kept for routing
        self.n_dec = 0
        self.s_dec = 0
        self.used_pre = 0
        self.it = 0
        self.pc = PrefixCache(spec.prefix_block_tokens) if spec.prefix_cache else None
        self.sb_dec = 0
        self.p_on = False
        self.p_s = self.p_e = self.p_dt = self.p_acc = self.p_kv = now
        self.p_k = self.p_kacc = self.p_n = self.p_run = 0
        self.p_pref = False
        self.p_st: StepTuple = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        self.stall = 0.0  # preemption dead time owed by the next block

    # -- planning -------------------------------------------------------------------------

    def _preempt(self, t: float, eng: ReplayEngine) -> None:
        """Evict the newest running sequences until the next decode step fits the KV cache."""
        running = self.running
        it = self.it
        while self.s_dec + self.n_dec * (it + 1) + self.used_pre > self.cap:
            _, seq = running.popitem()
            if seq.hv >= 0:  # decoding: keep its tokens, recompute prompt + generated later
                seq.gen += it - seq.j
                self.s_dec -= seq.off
                self.sb_dec -= seq.sb
                self.n_dec -= 1
                seq.hv = -1
            else:  # prefilling: it is the newest prefilling sequence
                self.prefilling.pop()
                self.used_pre -= seq.res
                seq.res = 0
            self._unpin(seq)
            seq.target = seq.inp + seq.gen
            seq.done = 0
            seq.chunk = 0
            self.waiting.appendleft(seq)
            spec = self.spec
            self.stall += spec.preempt_stall_s + spec.preempt_stall_s_per_token * seq.target
            eng.on_preempt(t)

    def _claim(self, seq: _Seq, budget: int, shared: int = 0) -> int:
        """KV tokens a waiting sequence claims when admitted: its whole prompt (less the
        ``shared`` prefix tokens a pinned prefix holds) and the token its last slice samples,
        or (chunk admission) only the slice scheduled now."""
        own = seq.target - shared
        if self.chunk_adm and own > budget:
            return budget
        return own + 1

    def _unpin(self, seq: _Seq) -> None:
        """The sequence no longer uses its prefix (finished, preempted or moved)."""
        if seq.sb:
            assert self.pc is not None
            self.used_pre -= self.pc.release(seq.pre)
            seq.sb = 0

    def plan(self, t: float, eng: ReplayEngine) -> None:
        """Schedule the next block starting at ``t`` (or go idle)."""
        n = self.n_dec
        it = self.it
        cap = self.cap
        if self.s_dec + n * (it + 1) + self.used_pre > cap:
            self._preempt(t, eng)
            n = self.n_dec
        used = self.s_dec + n * it + self.used_pre
        pc = self.pc
        if pc is not None and pc.idle_tokens > cap - used:
            pc.trim(cap - used)  # running requests need the room: evict idle prefixes, LRU
        waiting = self.waiting
        running = self.running
        prefilling = self.prefilling
        maxb = self.maxb
        if prefilling or (
            waiting
            and len(running) < maxb
            and (not running or used + n + self._claim(waiting[0], self.budget) <= self.adm_cap)
        ):
            # Mixed: decode tokens go first.  Unmixed: the decoders sit this iteration out.
            dec = n if self.mixed else 0
            budget = self.budget - dec
            pt = 0
            pairs = 0.0
            for seq in prefilling:
                c = seq.target - seq.done
                if c > budget:
                    c = budget
                seq.chunk = c
                if c:
                    pairs += c * (seq.done + c * 0.5)
                    pt += c
                    budget -= c
            admitted = 0
            adm_cap = self.adm_cap
            while budget > 0 and waiting and len(running) < maxb:
                seq = waiting[0]
                shared = 0
                held = False
                pin = 0  # KV tokens a prefix not yet held pins once this sequence is admitted
                if pc is not None and seq.pre >= 0:
                    shared = pc.aligned(seq.ptok, seq.target)
                    held = pc.holds(seq.pre)
                    pin = 0 if held or not shared else shared
                need = self._claim(seq, budget, shared)
                if running and used + n + need + pin > adm_cap:
                    break
                waiting.popleft()
                admitted += 1
                running[seq.uid] = seq
                prefilling.append(seq)
                self.used_pre += need
                used += need
                seq.res = need
                if shared:
                    assert pc is not None
                    pinned = pc.acquire(seq.pre, shared)
                    self.used_pre += pinned
                    used += pinned
                    seq.sb = shared
                    eng.acc.prefix_query += seq.target
                    if held:  # a hit: the prefix's KV is reused, only the rest is computed
                        seq.done = shared
                        eng.acc.prefix_hit += shared
                elif pc is not None:
                    eng.acc.prefix_query += seq.target
                c = seq.target - seq.done
                if c > budget:
                    c = budget
                seq.chunk = c
                pairs += c * (seq.done + c * 0.5)
                pt += c
                budget -= c
            if admitted:
                eng.on_queue(t, -admitted)
            st = self.m.mixed(pt, pairs, dec, self.s_dec + n * it + self.sb_dec if dec else 0)
            if self.stall > 0.0:
                st = (st[0] + self.stall, *st[1:])
                self.stall = 0.0
            self.p_k = 1 if dec else 0  # decode iterations this block advances
            self.p_dt = st[0]
            self.p_e = t + st[0]
            self.p_kv = used + dec
            self.p_pref = True
            n = dec  # sequences that decode in this block (p_n below)
        elif n:
            heap = self.heap
            while heap[0][2].hv != heap[0][1]:  # drop entries of evicted or re-queued sequences
                heapq.heappop(heap)
            k = heap[0][0] - it
            kkv = (cap - used) // n
            if kkv < k:
                k = kkv
            st = self.m.decode(n, self.s_dec + self.sb_dec + n * (it + (k - 1) * 0.5))
            if self.stall > 0.0:  # a preemption stalls one iteration
                k = 1
                st = (st[0] + self.stall, *st[1:])
                self.stall = 0.0
            self.p_k = k
            self.p_dt = st[0]
            self.p_e = t + k * st[0]
            self.p_kv = used + n * (k + 1) * 0.5
            self.p_pref = False
        else:
            self.p_on = False
            return
        self.p_on = True
        self.p_s = t
        self.p_acc = t
        self.p_kacc = 0
        self.p_n = n
        self.p_run = len(running)
        self.p_st = st
        eng._tie += 1  # schedule(), inlined: once per block
        heapq.heappush(eng._ends, (self.p_e, eng._tie, self))

    def cut_for_arrival(self, t: float, eng: ReplayEngine) -> None:
        """End a multi-iteration decode block at the first iteration boundary at or after ``t``."""
        k = -int(-(t - self.p_s) // self.p_dt)  # ceil
        if k <= 0:
            self.plan(t, eng)  # the block had not started: plan again with the new arrival
        elif k < self.p_k:
            self.p_kv -= self.p_n * (self.p_k - k) * 0.5
            self.p_k = k
            self.p_e = self.p_s + k * self.p_dt
            eng.schedule(self)

    # -- accounting and commit -------------------------------------------------------------

    def account(self, a: float, b: float, eng: ReplayEngine) -> None:
        """Add the in-block rates over ``[a, b]`` to the open window."""
        d = b - a
        if d <= 0.0:
            return
        acc = eng.acc
        st = self.p_st
        w = d / self.p_dt
        acc.busy += d
        acc.batch += self.p_run * d
        acc.kv += self.p_kv / self.cap * d
        acc.compute += st[1] * w
        acc.memory += st[2] * w
        acc.comm += st[3] * w
        acc.bubble += st[4] * w
        acc.overhead += st[5] * w
        if self.p_pref:
            acc.prefill += d

    def close_window(self, until: float, eng: ReplayEngine) -> None:
        """Account the part of the block in progress that lies before ``until``."""
        if self.p_on and self.p_s < until:
            self.account(max(self.p_s, self.p_acc), until, eng)
            kacc = int((until - self.p_s) / self.p_dt)
            if kacc > self.p_k:
                kacc = self.p_k
            eng.acc.tokens += self.p_n * (kacc - self.p_kacc)
            self.p_kacc = kacc
            self.p_acc = until

    def commit(self, eng: ReplayEngine) -> None:
        """Apply the block ending at ``p_e``: tokens, first tokens, finishes."""
        e = self.p_e
        acc = eng.acc
        # account(max(p_s, p_acc), e) inlined: commit runs once per block.
        a = self.p_s
        if self.p_acc > a:
            a = self.p_acc
        d = e - a
        if d > 0.0:
            st = self.p_st
            w = d / self.p_dt
            acc.busy += d
            acc.batch += self.p_run * d
            acc.kv += self.p_kv / self.cap * d
            acc.compute += st[1] * w
            acc.memory += st[2] * w
            acc.comm += st[3] * w
            acc.bubble += st[4] * w
            acc.overhead += st[5] * w
            if self.p_pref:
                acc.prefill += d
        acc.tokens += self.p_n * (self.p_k - self.p_kacc)
        self.it += self.p_k
        it = self.it
        running = self.running
        heap = self.heap
        while heap and heap[0][0] <= it:
            _, ver, seq = heapq.heappop(heap)
            if seq.hv != ver:
                continue
            seq.hv = -1
            seq.gen = seq.out
            del running[seq.uid]
            self.load -= 1
            self.n_dec -= 1
            self.s_dec -= seq.off
            self.sb_dec -= seq.sb
            if seq.sb:  # _unpin's own test, without the call for prefix-free requests
                self._unpin(seq)
            eng.on_finish(seq, e, self.serial)
        if self.p_pref:
            keep: list[_Seq] = []
            for seq in self.prefilling:
                c = seq.chunk
                if c:
                    seq.chunk = 0
                    seq.done += c
                    if seq.done < seq.target and self.chunk_adm:
                        # The next slice claims its blocks now (vLLM allocates per slice).
                        more = min(seq.target - seq.sb + 1 - seq.res, self.budget)
                        seq.res += more
                        self.used_pre += more
                    if seq.done >= seq.target:
                        self.used_pre -= seq.res
                        seq.res = 0
                        seq.gen += 1  # the last prefill slice samples a token
                        acc.tokens += 1
                        if seq.first < 0.0:
                            seq.first = e
                            acc.ttft.append((e - seq.entered) * 1e3)
                        if seq.gen >= seq.out:
                            del running[seq.uid]
                            self.load -= 1
                            if seq.sb:
                                self._unpin(seq)
                            eng.on_finish(seq, e, self.serial)
                        else:
                            seq.j = it
                            # Its prefix's KV is the pinned prefix's, not its own.
                            seq.off = seq.inp - seq.sb + seq.gen - it
                            self.s_dec += seq.off
                            self.sb_dec += seq.sb
                            self.n_dec += 1
                            eng._ver += 1  # next_version(), inlined
                            ver = eng._ver
                            seq.hv = ver
                            heapq.heappush(heap, (it + seq.out - seq.gen, ver, seq))
                        continue
                keep.append(seq)
            self.prefilling = keep
        self.p_on = False

    def evacuate(self, now: float, eng: ReplayEngine) -> list[_Seq]:
        """Remove every request (replica lost at ``now``), keeping tokens already generated.

        Decode iterations of the current block that completed by ``now`` are committed first;
        a half-done prefill is lost.
        """
        if self.p_on:
            if not self.p_pref:
                k = int((now - self.p_s) / self.p_dt)
                if 0 < k < self.p_k:
                    self.p_k = k
                    self.p_e = self.p_s + k * self.p_dt
                    self.commit(eng)
            self.p_on = False
        out: list[_Seq] = []
        it = self.it
        for seq in self.running.values():
            if seq.hv >= 0:
                seq.gen += it - seq.j
                seq.hv = -1
            seq.target = seq.inp + seq.gen
            seq.done = 0
            seq.chunk = 0
            seq.sb = 0
            out.append(seq)
        out.extend(self.waiting)
        self.running.clear()
        self.waiting.clear()
        self.load = 0
        self.prefilling.clear()
        self.heap.clear()
        self.n_dec = self.s_dec = self.used_pre = self.sb_dec = 0
        if self.pc is not None:
            self.pc.clear()
        return out
