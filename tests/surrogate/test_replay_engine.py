"""Behaviour of the replay engine with a transparent linear step model."""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.errors import InvalidInput
from koi.surrogate.replay import (
    CachedStepModel,
    ReplayConfig,
    ReplayEngine,
    ReplicaSpec,
    Request,
    StepTime,
    WindowStats,
    batch_requests,
    run_closed_loop,
    sample_requests,
)
from koi.types import LengthDist, Routing, WorkloadProfile


@attrs.frozen
class Linear:
    """Step time linear in every input: easy to reason about by hand."""

    overhead: float = 0.004
    per_prefill_token: float = 2e-5
    per_pair: float = 0.0
    per_seq: float = 1e-4
    per_ctx: float = 1e-8
    comm: float = 0.0

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        return StepTime(
            compute_s=self.per_prefill_token * prefill_tokens
            + self.per_pair * prefill_pairs
            + self.per_seq * decode_seqs,
            memory_s=self.per_ctx * decode_context_tokens,
            comm_s=self.comm,
            overhead_s=self.overhead,
        )


def spec(kv: int = 200_000, batch: int = 256, tokens: int = 4096, **model: float) -> ReplicaSpec:
    return ReplicaSpec(Linear(**model), kv, batch, tokens)


def workload(rate: float, isl: float = 500, osl: float = 200, cv: float = 0.5) -> WorkloadProfile:
    return WorkloadProfile(
        input_len=LengthDist(isl, cv, 8 * int(isl)),
        output_len=LengthDist(osl, cv, 8 * int(osl)),
        rate_rps=rate,
    )


def open_loop(
    replicas: list[ReplicaSpec],
    rate: float,
    windows: list[float],
    *,
    seed: int = 0,
    routing: Routing = Routing.LEAST_LOADED,
) -> tuple[ReplayEngine, list[WindowStats], int]:
    reqs = sample_requests(workload(rate), np.random.default_rng(seed), 0.0, windows[-1])
    eng = ReplayEngine(replicas, routing)
    eng.submit(reqs)
    return eng, [eng.advance(w) for w in windows], len(reqs)


# -- exact small cases ----------------------------------------------------------------------


def test_single_request_timeline_is_exact() -> None:
    # One request alone: chunked prefill over ceil(1000 / 256) = 4 iterations, then 99 decode
    # iterations jumped as one block; each must cost exactly what the model says.
    m = Linear()
    eng = ReplayEngine([ReplicaSpec(m, 100_000, 8, 256)], Routing.ROUND_ROBIN)
    eng.submit([Request(7, 1.0, 1000, 100)])
    w = eng.advance(100.0)
    prefill = sum(
        m.step(prefill_tokens=c, prefill_pairs=0, decode_seqs=0, decode_context_tokens=0).time_s
        for c in (256, 256, 256, 232)
    )
    decode = sum(
        m.step(
            prefill_tokens=0, prefill_pairs=0, decode_seqs=1, decode_context_tokens=1001 + j
        ).time_s
        for j in range(99)
    )
    assert w.request_ids.tolist() == [7]
    assert w.ttft_ms[0] == pytest.approx(prefill * 1e3, rel=1e-9)
    assert w.tpot_ms[0] == pytest.approx(decode / 99 * 1e3, rel=1e-6)
    assert w.output_tokens_generated == 100
    assert w.busy_s == pytest.approx(prefill + decode, rel=1e-6)
    assert w.prefill_share == pytest.approx(prefill / (prefill + decode), rel=1e-6)


@attrs.frozen
class Spy:
    """A 10 ms step that records (prefill tokens, decode sequences) of every call."""

    calls: list[tuple[int, int]] = attrs.field(factory=list)

    def step(self, **kw: float) -> StepTime:
        self.calls.append((int(kw["prefill_tokens"]), int(kw["decode_seqs"])))
        return StepTime(compute_s=0.01, memory_s=0.0)


def _decoder_and_long_prompt(spy: Spy, *, mixed: bool = True) -> WindowStats:
    """A decoding request and a 500-token prompt arriving behind it, 100 tokens per iteration."""
    eng = ReplayEngine(
        [ReplicaSpec(spy, 100_000, 8, 100, mixed_prefill=mixed)],
        Routing.ROUND_ROBIN,
        config=ReplayConfig(cache_step_times=False),
    )
    eng.submit([Request(0, 0.0, 10, 50), Request(1, 0.015, 500, 5)])
    return eng.advance(10.0)


def test_decode_tokens_go_first_in_the_token_budget() -> None:
    # The decoding request and the new long prompt share the budget: the prompt gets 99.
    spy = Spy()
    _decoder_and_long_prompt(spy)
    assert spy.calls[0] == (10, 0)
    assert (99, 1) in spy.calls
    assert all(p + d <= 100 for p, d in spy.calls)


def test_prefill_first_engine_pauses_decodes_and_gives_prompts_the_whole_budget() -> None:
    # The same two requests, on an engine that does not mix prefill and decode.
    spy = Spy()

    def run(*, mixed: bool) -> dict[int, tuple[float, float]]:
        spy.calls.clear()
        w = _decoder_and_long_prompt(spy, mixed=mixed)
        assert w.output_tokens_generated == 55  # every token of both, either way
        ttft = w.first_token_s - w.arrival_s
        tpot = (w.finish_s - w.first_token_s) / (w.output_tokens - 1)
        return {
            int(i): (float(a), float(b)) for i, a, b in zip(w.request_ids, ttft, tpot, strict=True)
        }

    mixed = run(mixed=True)
    first = run(mixed=False)
    assert all(p == 0 or d == 0 for p, d in spy.calls)  # never both in one iteration
    assert (100, 0) in spy.calls  # the prompt takes the whole budget while the decoder waits
    # Five prefill-only iterations instead of six shared ones: the prompt's first token comes
    # sooner and the paused decoder's TPOT grows.
    assert first[1][0] < mixed[1][0]
    assert first[0][1] > mixed[0][1]


@pytest.mark.parametrize("isl", [512, 2048])
def test_prefill_first_keeps_a_closed_loop_wave_together(isl: int) -> None:
    # Clients released together: with mixed iterations early finishers drift ahead and the
    # waves spread out; a prefill-first engine holds decodes while the wave prefills, so the
    # waves stay whole -- longer TTFT, shorter TPOT, at about the same throughput.
    def run(*, mixed: bool) -> WindowStats:
        wl = WorkloadProfile(
            input_len=LengthDist(isl, 0.0, isl),
            output_len=LengthDist(128, 0.0, 128),
            total_requests=1,
        )
        reqs = batch_requests(wl, np.random.default_rng(0), 4000)
        replica = ReplicaSpec(Linear(), 10_000_000, 256, 2048, mixed_prefill=mixed)
        return run_closed_loop([replica], Routing.ROUND_ROBIN, reqs, 64, 60.0, warmup_s=10.0)

    mixed, first = run(mixed=True), run(mixed=False)
    assert np.median(first.ttft_ms) > 1.5 * np.median(mixed.ttft_ms)
    assert np.median(first.tpot_ms) < np.median(mixed.tpot_ms)
    assert first.throughput_tok_s == pytest.approx(mixed.throughput_tok_s, rel=0.25)


def test_deterministic_for_a_seed() -> None:
    _, a, _ = open_loop([spec(), spec()], 30.0, [60.0, 120.0], seed=3)
    _, b, _ = open_loop([spec(), spec()], 30.0, [60.0, 120.0], seed=3)
    _, c, _ = open_loop([spec(), spec()], 30.0, [60.0, 120.0], seed=4)
    assert a == b
    assert a != c


def test_window_boundaries_do_not_change_the_simulation() -> None:
    _, one, _ = open_loop([spec()], 15.0, [300.0], seed=1)
    _, many, _ = open_loop([spec()], 15.0, [float(t) for t in range(7, 301, 7)] + [300.0], seed=1)
    finish = np.concatenate([w.finish_s for w in many])
    np.testing.assert_allclose(finish, one[0].finish_s)
    assert sum(w.output_tokens_generated for w in many) == one[0].output_tokens_generated
    assert sum(w.busy_s for w in many) == pytest.approx(one[0].busy_s, rel=1e-9)
    assert sum(w.compute_s for w in many) == pytest.approx(one[0].compute_s, rel=1e-9)


def test_future_arrivals_wait_for_their_time() -> None:
    eng = ReplayEngine([spec()], Routing.ROUND_ROBIN)
    eng.submit([Request(0, 50.0, 100, 10)])
    w = eng.advance(40.0)
    assert (w.arrivals, w.finished, eng.pending_arrivals, eng.backlog) == (0, 0, 1, 0)
    w = eng.advance(60.0)
    assert w.arrivals == 1
    assert w.finished == 1
    assert w.arrival_s[0] == 50.0


# -- conservation and queueing laws -----------------------------------------------------------


@given(
    n_rep=st.integers(1, 3),
    rate=st.floats(1.0, 60.0),
    kv=st.integers(3_000, 60_000),
    cuts=st.lists(st.floats(1.0, 60.0), min_size=1, max_size=4),
    drop=st.booleans(),
    routing=st.sampled_from(Routing),
    seed=st.integers(0, 2**16),
)
def test_every_request_finishes_or_is_still_backlogged(
    n_rep: int,
    rate: float,
    kv: int,
    cuts: list[float],
    drop: bool,
    routing: Routing,
    seed: int,
) -> None:
    reqs = sample_requests(workload(rate, 300, 100, 1.0), np.random.default_rng(seed), 0.0, 40.0)
    eng = ReplayEngine([spec(kv=kv, batch=32, tokens=512)] * n_rep, routing)
    eng.submit(reqs)
    finished: list[int] = []
    rejected = 0
    t = 0.0
    for i, c in enumerate(sorted(cuts)):
        t = max(t, c)
        w = eng.advance(t)
        finished += w.request_ids.astype(int).tolist()
        rejected += w.rejected
        assert w.queued_end + w.running_end == eng.backlog
        assert 0.0 <= w.kv_cache_util <= 1.0
        assert 0.0 <= w.busy_fraction <= 1.0 + 1e-9
        if drop and i == 0 and eng.n_replicas:
            eng.remove_replica(0)
    assert len(set(finished)) == len(finished)  # nobody finishes twice
    assert len(finished) + rejected + eng.backlog + eng.pending_arrivals == len(reqs)
    if eng.n_replicas == 0:
        eng.add_replica(spec(kv=kv, batch=32, tokens=512))
    w = eng.advance(t + 10_000.0)  # drain
    assert eng.backlog == 0
    assert len(finished) + w.finished + rejected + w.rejected == len(reqs)


def test_littles_law_holds_at_moderate_load() -> None:
    # L (time-average requests in the system) = lambda * W (mean time in the system).
    _, (warm, w), _ = open_loop([spec(), spec()], 40.0, [200.0, 2200.0], seed=5)
    in_system = (w.queue_depth + w.mean_batch_size) * w.mean_replicas
    sojourn = float(np.mean(w.finish_s - w.arrival_s))
    lam = w.arrivals / w.duration_s
    assert in_system == pytest.approx(lam * sojourn, rel=0.05)
    assert warm.arrivals > 0


# -- overload, KV pressure, replicas, routing ------------------------------------------------


def test_overload_makes_p99_ttft_grow_with_the_window() -> None:
    def p99_ttft(rate: float, horizon: float) -> float:
        _, (w,), _ = open_loop([spec()], rate, [horizon], seed=2)
        return w.p99_ttft_with_unserved_ms()

    light = [p99_ttft(5.0, h) for h in (60.0, 240.0)]
    heavy = [p99_ttft(60.0, h) for h in (60.0, 240.0)]
    assert light[1] / light[0] < 1.5
    assert heavy[1] / heavy[0] > 3.0
    # And, window after window on one engine, the served p99 TTFT keeps rising too.
    _, ws, _ = open_loop([spec()], 60.0, [60.0, 120.0, 180.0, 240.0], seed=2)
    served = [w.p99(w.ttft_ms) for w in ws]
    assert served == sorted(served)
    assert ws[-1].oldest_unserved_age_s > ws[0].oldest_unserved_age_s > 1.0
    assert ws[-1].queued_end > ws[0].queued_end > 0


def test_preemption_happens_only_when_kv_is_tight() -> None:
    _, (tight,), _ = open_loop([spec(kv=12_000, batch=64)], 8.0, [200.0], seed=1)
    _, (ample,), _ = open_loop([spec(kv=500_000, batch=64)], 8.0, [200.0], seed=1)
    assert tight.preemptions > 0
    assert tight.preemption_rate == pytest.approx(tight.preemptions / 200.0)
    assert tight.kv_cache_util > 10 * ample.kv_cache_util
    assert ample.preemptions == 0
    assert ample.kv_cache_util < 0.1
    # Recompute preemption keeps tokens: every finished request emitted exactly its output.
    assert tight.output_tokens_generated >= int(tight.output_tokens.sum()) * 0.9


def test_removing_a_replica_requeues_its_work() -> None:
    reqs = batch_requests(workload(1.0), np.random.default_rng(0), 200)
    eng = ReplayEngine([spec(batch=16), spec(batch=16)], Routing.ROUND_ROBIN)
    eng.submit(reqs)
    eng.advance(2.0)
    before = eng.backlog
    eng.remove_replica(1)
    assert eng.backlog == before
    assert eng.n_replicas == 1
    w = eng.advance(3.0)
    assert w.requeued > 16
    eng.remove_replica(0)  # no replica left: everything is held, nothing is lost
    assert eng.backlog == before - w.finished
    held = eng.advance(60.0)
    assert held.finished == 0
    assert held.unserved > 0
    assert held.queue_depth == pytest.approx(eng.queued)
    eng.set_replicas([spec(batch=16)] * 3)
    w = eng.advance(10_000.0)
    assert eng.backlog == 0
    assert w.requeued == 0


def test_hand_over_moves_every_unfinished_request_once() -> None:
    reqs = sample_requests(workload(20.0), np.random.default_rng(3), 0.0, 10.0)
    old = ReplayEngine([spec(batch=16)], Routing.LEAST_LOADED)
    new = ReplayEngine([spec(), spec()], Routing.LEAST_LOADED, start_s=0.0)
    old.submit(reqs)
    first = old.advance(4.0)
    new.advance(4.0)
    backlog, future = old.backlog, old.pending_arrivals
    assert old.running > 0
    assert future > 0
    assert old.hand_over(new) == backlog + future
    assert old.n_replicas == 0
    assert old.backlog == old.pending_arrivals == 0
    assert old.advance(100.0).finished == 0
    rest = new.advance(10_000.0)
    assert new.backlog == 0
    ids = [*first.request_ids, *rest.request_ids]
    assert sorted(ids) == sorted(r.id for r in reqs)  # each finishes once, ids and arrivals kept
    assert rest.requeued == backlog
    # The requests keep their first arrival; the new engine's own latencies count from 4 s.
    assert min(rest.arrival_s) < 4.0
    here = rest.first_token_s > 4.0
    engine_ttft = (rest.first_token_s - np.maximum(rest.arrival_s, 4.0))[here] * 1e3
    assert sorted(rest.ttft_ms) == pytest.approx(sorted(engine_ttft))
    assert len(rest.tpot_ms) < int((rest.output_tokens > 1).sum())
    with pytest.raises(InvalidInput, match="itself"):
        new.hand_over(new)


def test_set_replicas_keeps_unchanged_positions() -> None:
    a, b = spec(), spec(per_seq=2e-4)
    eng = ReplayEngine([a, a], Routing.ROUND_ROBIN)
    eng.submit(batch_requests(workload(1.0), np.random.default_rng(0), 20))
    eng.advance(0.5)
    eng.set_replicas([a, a, b])
    assert eng.replicas == (a, a, b)
    assert eng.advance(1.0).requeued == 0
    eng.set_replicas([b])
    assert eng.advance(1.5).requeued > 0


def test_each_tpot_names_the_replica_it_was_measured_on() -> None:
    slow = spec(per_seq=3e-4, overhead=0.012)  # every decode step three times as long
    eng, (st,), _ = open_loop([spec(), slow, spec()], 6.0, [60.0])
    assert eng.replica_serials == (0, 1, 2)
    assert len(st.tpot_replica) == len(st.tpot_ms) > 0
    med = {k: float(np.median(st.tpot_ms[st.tpot_replica == k])) for k in (0, 1, 2)}
    assert med[1] > 2.5 * max(med[0], med[2])
    eng.remove_replica(1)
    eng.add_replica(spec())
    assert eng.replica_serials == (0, 2, 3)  # a serial is never reused
    assert 1.0 not in set(eng.advance(120.0).tpot_replica)  # its requests finished elsewhere


def test_round_robin_and_least_loaded_differ_under_skew() -> None:
    # Alternate long and short generations over two replicas: round robin sends every long
    # one to the same replica, least loaded balances them.
    # Each replica decodes at most ~1,700 tok/s (batch 8): the long requests alone offer
    # ~1,900 tok/s, too much for one replica, not for two.
    reqs = [Request(i, i * 0.4, 200, 1500 if i % 2 == 0 else 20) for i in range(300)]

    def run(routing: Routing) -> WindowStats:
        eng = ReplayEngine([spec(batch=8), spec(batch=8)], routing)
        eng.submit(reqs)
        return eng.advance(150.0)

    rr, ll = run(Routing.ROUND_ROBIN), run(Routing.LEAST_LOADED)
    assert rr != ll
    assert ll.p99(ll.ttft_ms) < 0.5 * rr.p99(rr.ttft_ms)
    assert ll.queue_depth < 0.1 * rr.queue_depth


def test_request_too_large_for_the_kv_cache_is_rejected() -> None:
    eng = ReplayEngine([spec(kv=1_000)], Routing.LEAST_LOADED)
    eng.submit([Request(0, 0.0, 900, 200), Request(1, 0.0, 100, 10)])
    w = eng.advance(10.0)
    assert (w.rejected, w.finished, eng.backlog) == (1, 1, 0)


# -- closed loop and mediators ------------------------------------------------------------


def test_closed_loop_keeps_concurrency_in_flight() -> None:
    def run(conc: int) -> WindowStats:
        reqs = batch_requests(workload(1.0), np.random.default_rng(1), 100_000)
        return run_closed_loop([spec()], Routing.LEAST_LOADED, reqs, conc, 60.0, warmup_s=10.0)

    low, high = run(4), run(64)
    for w, conc in ((low, 4), (high, 64)):
        assert w.mean_batch_size + w.queue_depth == pytest.approx(conc, rel=0.02)
    assert high.throughput_tok_s > 5 * low.throughput_tok_s
    assert high.p50(high.tpot_ms) > low.p50(low.tpot_ms)


def test_component_shares_follow_the_step_model() -> None:
    _, (w,), _ = open_loop([spec(comm=0.002)], 20.0, [120.0], seed=0)
    assert 0.0 < w.comm_share < 1.0
    assert w.comm_share == pytest.approx(w.comm_s / w.busy_s)
    assert w.compute_s + w.comm_s + w.overhead_s <= w.busy_s + 1e-9
    assert 0.0 < w.compute_util <= w.busy_fraction <= 1.0
    assert w.bubble_fraction == 0.0
    _, (no_comm,), _ = open_loop([spec()], 20.0, [120.0], seed=0)
    assert no_comm.comm_share == 0.0
    _, (more,), _ = open_loop([spec(comm=0.006)], 20.0, [120.0], seed=0)
    assert more.comm_share > w.comm_share


def test_window_stats_are_read_only_and_robust_when_empty() -> None:
    eng = ReplayEngine([spec()], Routing.ROUND_ROBIN)
    w = eng.advance(5.0)
    assert w.finished == 0
    assert math.isnan(w.p99(w.ttft_ms))
    assert w.throughput_tok_s == 0.0
    assert w.kv_cache_util == 0.0
    with pytest.raises(ValueError, match="read-only"):
        w.ttft_ms[:] = 1.0
    assert eng.advance(5.0).duration_s == 0.0


def test_bad_inputs_raise_invalid_input() -> None:
    eng = ReplayEngine([spec()], Routing.ROUND_ROBIN)
    eng.advance(10.0)
    with pytest.raises(InvalidInput, match="until_s"):
        eng.advance(5.0)
    with pytest.raises(InvalidInput, match="requests"):
        eng.submit([Request(0, 1.0, 0, 5)])
    with pytest.raises(InvalidInput, match="requests"):
        eng.submit([Request(0, math.nan, 5, 5)])
    with pytest.raises(InvalidInput, match="kv_capacity_tokens"):
        ReplicaSpec(Linear(), 0, 4, 4)
    with pytest.raises(InvalidInput, match="step_model"):
        ReplicaSpec(object(), 10, 4, 4)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="index"):
        eng.remove_replica(3)
    with pytest.raises(InvalidInput, match="concurrency"):
        eng.feed([], 0)
    zero = ReplayEngine([spec(overhead=0.0, per_prefill_token=0.0)], Routing.ROUND_ROBIN)
    zero.submit([Request(0, 0.0, 5, 5)])
    with pytest.raises(InvalidInput, match="step_model"):
        zero.advance(1.0)


def test_cached_and_uncached_step_times_agree_for_an_affine_model() -> None:
    def run(config: ReplayConfig) -> WindowStats:
        reqs = sample_requests(workload(20.0), np.random.default_rng(9), 0.0, 120.0)
        eng = ReplayEngine([spec()], Routing.LEAST_LOADED, config=config)
        eng.submit(reqs)
        return eng.advance(120.0)

    cached, plain = run(ReplayConfig()), run(ReplayConfig(cache_step_times=False))
    np.testing.assert_allclose(cached.finish_s, plain.finish_s, rtol=1e-9)
    assert cached.busy_s == pytest.approx(plain.busy_s, rel=1e-9)
    bucketed = run(ReplayConfig(step_affine=False, step_resolution=0.01))
    assert bucketed.p50(bucketed.tpot_ms) == pytest.approx(plain.p50(plain.tpot_ms), rel=0.01)


def test_a_shared_cache_is_used_as_is() -> None:
    shared = CachedStepModel(Linear())
    eng = ReplayEngine([ReplicaSpec(shared, 100_000, 16, 1024)] * 2, Routing.ROUND_ROBIN)
    eng.submit(batch_requests(workload(1.0), np.random.default_rng(0), 10))
    eng.advance(30.0)
    assert len(shared) > 0


def test_a_bounded_interpolation_memo_gives_the_same_step_times() -> None:
    # Prefill time quadratic in the prompt tokens: the grid interpolates, so the memo matters.
    curved = Linear(per_pair=3e-9)
    reqs = sample_requests(workload(30.0, isl=900), np.random.default_rng(4), 0.0, 90.0)

    def run(cache: CachedStepModel) -> WindowStats:
        eng = ReplayEngine([ReplicaSpec(cache, 200_000, 64, 2048)] * 2, Routing.LEAST_LOADED)
        eng.submit(reqs)
        return eng.advance(90.0)

    big, small = CachedStepModel(curved), CachedStepModel(curved, interp_limit=8)
    wide, narrow = run(big), run(small)
    np.testing.assert_array_equal(narrow.finish_s, wide.finish_s)  # the same floats
    np.testing.assert_array_equal(narrow.ttft_ms, wide.ttft_ms)
    assert len(wide.finish_s) > 100
    assert small.footprint < big.footprint - 100
    with pytest.raises(InvalidInput, match="interp_limit"):
        CachedStepModel(curved, interp_limit=0)


def test_feed_restamps_arrivals_when_issued() -> None:
    reqs = [Request(i, 999.0, 50, 5) for i in range(6)]
    eng = ReplayEngine([spec()], Routing.ROUND_ROBIN, start_s=10.0)
    eng.feed(reqs, 2)
    w = eng.advance(20.0)
    assert w.finished == 6
    assert w.arrival_s[:2].tolist() == [10.0, 10.0]
    np.testing.assert_array_equal(np.sort(w.arrival_s[2:]), np.sort(w.finish_s[:4]))
    with pytest.raises(InvalidInput, match="step_resolution"):
        ReplayConfig(step_resolution=1.0)
