"""Per-metric claims: a planner against the best other planner on each metric.

A lead is claimed metric by metric, against whichever planner is best on that metric — never
against one "strongest baseline" chosen for the composite.  The references (which see the
truth) are left out of the comparison; koi's own ablations are in it, and the best planner that
is not koi or one of its ablations is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["CLAIM_METRICS", "Claim", "claims", "format_claims"]

#: (metric, label, kind, higher is better); kind ``pct`` differences are in points, ``rel``
#: relative, ``num`` absolute.
CLAIM_METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("composite", "composite", "num", True),
    ("goodput_tok_s", "goodput (tok/s)", "rel", True),
    ("cost_per_slo_token_usd", "$ per SLO-token", "rel", False),
    ("online_admission", "online admission", "pct", True),
    ("batch_admission", "batch admission", "pct", True),
    ("batch_progress", "batch progress", "pct", True),
    ("ttft_attainment", "TTFT attainment", "pct", True),
    ("tpot_attainment", "TPOT attainment", "pct", True),
    ("deadline_attainment", "deadline attainment", "pct", True),
    ("quality", "quality Q", "pct", True),
    ("coverage", "coverage C", "pct", True),
    ("efficiency", "efficiency E", "pct", True),
)


@attrs.frozen
class Claim:
    """``planner``'s mean on ``metric`` against the best other planner's and the best
    baseline's (a planner that is neither ``planner`` nor one of its ablations)."""

    metric: str
    label: str
    kind: str
    higher_is_better: bool
    planner: str
    value: float | None
    best_other: str | None
    best_other_value: float | None
    best_baseline: str | None
    best_baseline_value: float | None

    @property
    def leads(self) -> bool | None:
        """Strictly better than every other planner (``None`` when not comparable)."""
        return _better(self.value, self.best_other_value, self.higher_is_better)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the verdicts and differences."""
        out = attrs.asdict(self)
        out["leads"] = self.leads
        out["vs_best_other"] = self.difference(self.best_other_value)
        out["vs_best_baseline"] = self.difference(self.best_baseline_value)
        return out

    def difference(self, against: float | None) -> float | None:
        """``value − against``: points for ``pct`` (×100), relative for ``rel``."""
        if self.value is None or against is None:
            return None
        if self.kind == "rel":
            return self.value / against - 1.0 if against > 0 else None
        if self.kind == "pct":
            return 100.0 * (self.value - against)
        return self.value - against


def _better(a: float | None, b: float | None, higher: bool) -> bool | None:
    if a is None or b is None:
        return None
    return a > b if higher else a < b


def _best(
    summary: Mapping[str, Mapping[str, Any]], names: Sequence[str], metric: str, higher: bool
) -> tuple[str | None, float | None]:
    vals = [(n, summary[n].get(metric)) for n in names]
    finite = [(n, float(v)) for n, v in vals if v is not None and math.isfinite(v)]
    if not finite:
        return None, None
    return max(finite, key=lambda nv: nv[1]) if higher else min(finite, key=lambda nv: nv[1])


def claims(summary: Mapping[str, Mapping[str, Any]], planner: str = "koi") -> list[Claim]:
    """One :class:`Claim` per metric of :data:`CLAIM_METRICS` for ``planner`` (empty when the
    summary has no such planner or nothing to compare it with)."""
    if planner not in summary:
        return []
    others = [n for n, e in summary.items() if n != planner and not e.get("reference")]
    baselines = [n for n in others if not n.startswith(f"{planner}-")]
    if not others:
        return []
    out = []
    for metric, label, kind, higher in CLAIM_METRICS:
        value = summary[planner].get(metric)
        other, other_value = _best(summary, others, metric, higher)
        base, base_value = _best(summary, baselines, metric, higher)
        out.append(
            Claim(
                metric=metric,
                label=label,
                kind=kind,
                higher_is_better=higher,
                planner=planner,
                value=value if value is None else float(value),
                best_other=other,
                best_other_value=other_value,
                best_baseline=base,
                best_baseline_value=base_value,
            )
        )
    return out


def _value(x: float | None, kind: str, metric: str) -> str:
    if x is None:
        return "n/a"
    if kind == "pct":
        return f"{100 * x:.1f} %"
    if metric == "cost_per_slo_token_usd":
        return f"{x:.2e}"
    if metric == "goodput_tok_s":
        return f"{x:,.0f}"
    return f"{x:.1f}"


def _diff(x: float | None, kind: str) -> str:
    if x is None:
        return "n/a"
    if kind == "rel":
        return f"{100 * x:+.1f} %"
    if kind == "pct":
        return f"{x:+.1f} pt"
    return f"{x:+.1f}"


def _verdict(c: Claim, against: float | None) -> str:
    if c.value is None or against is None:
        return "n/a"
    if c.value == against:
        return "level"
    return "leads" if _better(c.value, against, c.higher_is_better) else "trails"


def _vs(c: Claim, against: float | None) -> str:
    return f"{_diff(c.difference(against), c.kind)} ({_verdict(c, against)})"


def format_claims(rows: Sequence[Claim], *, markdown: bool = False) -> str:
    """The claims as a table: the planner's value, the best other planner (its ablations
    included) and the best baseline on each metric, and the difference to each."""
    if not rows:
        return ""
    p = rows[0].planner
    headers = [
        "metric",
        p,
        "best other planner",
        f"{p} vs it",
        "best baseline",
        f"{p} vs it",
    ]
    table = [
        [
            c.label,
            _value(c.value, c.kind, c.metric),
            f"{c.best_other} {_value(c.best_other_value, c.kind, c.metric)}",
            _vs(c, c.best_other_value),
            f"{c.best_baseline} {_value(c.best_baseline_value, c.kind, c.metric)}",
            _vs(c, c.best_baseline_value),
        ]
        for c in rows
    ]
    note = (
        f"Per metric, {p} against the best other planner on that metric (references, which see "
        f"the truth, left out; {p}'s ablations in) and against the best baseline; means over "
        "seeds; differences in points for percentages, relative for goodput and cost "
        "(lower cost is better)."
    )
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|---|" + "--:|" * (len(headers) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in table]
        return "\n".join(lines) + f"\n\n{note}\n"
    widths = [max(len(headers[i]), *(len(r[i]) for r in table)) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in table)]
    return "\n".join(out) + f"\n{note}\n"
