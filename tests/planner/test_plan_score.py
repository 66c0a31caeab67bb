"""The tick maximises koi.scoring's Φ: the selector's objective of the plan it chose equals
``plan_score`` of that plan, computed from the candidates' terms and what they exercise."""

from __future__ import annotations

import pytest

from koi.planner import Planner
from koi.planner._commit import selection_problem
from koi.planner._evaluate import Evaluator
from koi.planner._propose import dag_view, job_mechanisms, propose_and_evaluate
from koi.scoring import JobTerms, plan_score
from koi.selector import select
from koi.testing.fakes import example_snapshot


def test_the_selectors_objective_is_the_plan_score() -> None:
    planner = Planner()
    snapshot = example_snapshot()
    state, cfg = planner.state, planner.config
    jobs = list(snapshot.jobs)
    evaluator = Evaluator(
        snapshot=snapshot,
        state=state,
        surrogate=planner.surrogate,
        gpus=planner.gpus,
        models=planner.models,
        dag=planner.dag,
        cfg=cfg,
        reference_cost={j.id: 1.0 for j in jobs},
    )
    candidates = Planner._incumbents(jobs, snapshot, evaluator)
    propose_and_evaluate(
        jobs,
        candidates,
        host=planner.host,
        evaluator=evaluator,
        books={},
        view=dag_view(planner.dag, state.evidence, causal_graph=True),
        mechanisms={
            j.id: job_mechanisms(j, (), snapshot, gpus=planner.gpus, models=planner.models)
            for j in jobs
        },
        evidence=state.evidence,
        cfg=cfg,
        errors=[],
    )
    problem = selection_problem(snapshot, state, jobs, candidates, evaluator, cfg)
    selection = select(problem, cfg=cfg.selector)

    chosen = [
        ev
        for job in jobs
        for ev in candidates[job.id].values()
        if ev.report.key == selection.chosen[job.id]
    ]
    terms: list[JobTerms] = [ev.terms for ev in chosen if ev.terms is not None]
    assert len(terms) == len(jobs)
    covered = {item for ev in chosen if ev.candidate for item in ev.candidate.covers}
    mechanisms = covered & evaluator.mechanism_items
    edges = covered - mechanisms
    assert edges, "a cold planner's plan explores: the test must exercise Expl(P)"
    phi = plan_score(
        terms,
        edges,
        {e: evaluator.uncertainty[e] for e in edges},
        mechanisms_covered=mechanisms,
        mechanism_uncertainty={m: evaluator.uncertainty[m] for m in mechanisms},
        cfg=cfg.scoring,
        lam=state.calibration.lam,
        beta=state.calibration.beta,
    )
    assert selection.objective == pytest.approx(phi, rel=1e-9, abs=1e-9)
