"""The paper-like results table: one row per planner, mean ± spread over seeds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["COLUMNS", "format_table"]

#: (metric, header, kind) — kind: ``pct`` (a fraction shown in %), ``int``, ``cost``, ``num``.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("goodput_tok_s", "Goodput tok/s", "int"),
    ("cost_per_slo_token_usd", "$/SLO-token", "cost"),
    ("online_admission", "Online adm %", "pct"),
    ("batch_admission", "Batch adm %", "pct"),
    ("batch_progress", "Batch prog %", "pct"),
    ("ttft_attainment", "TTFT %", "pct"),
    ("tpot_attainment", "TPOT %", "pct"),
    ("composite", "Composite", "num"),
    ("swaps", "Swaps", "int"),
)


def _cell(mean: float | None, spread: float | None, kind: str) -> str:
    if mean is None:
        return "n/a"
    s = spread or 0.0
    if kind == "pct":
        return f"{100 * mean:.1f} ± {100 * s:.1f}"
    if kind == "int":
        return f"{mean:,.0f} ± {s:,.0f}"
    if kind == "cost":
        return f"{mean:.2e} ± {s:.1e}"
    return f"{mean:.1f} ± {s:.1f}"


def format_table(summary: Mapping[str, Mapping[str, Any]], *, markdown: bool = False) -> str:
    """The table of :func:`koi.bench.aggregate`'s ``summary``, as text or Markdown.

    The planner column marks the references (``milp-truth*``, ``koi-truth*``) and the
    stochastic planners (``†``).
    """
    headers = ["Planner", "Seeds", *(h for _, h, _ in COLUMNS)]
    rows: list[list[str]] = []
    for name, entry in summary.items():
        label = (
            name
            + ("*" if entry.get("reference") else "")
            + ("†" if entry.get("stochastic") else "")
        )
        spread = entry.get("spread", {})
        rows.append(
            [
                label,
                str(len(entry.get("seeds", ()))),
                *(_cell(entry.get(m), spread.get(m), kind) for m, _, kind in COLUMNS),
            ]
        )
    notes = (
        "mean ± sample std over seeds (the seed draws the world too); "
        "* reference, not a competitor (sees the truth), † stochastic planner"
    )
    if markdown:
        lines = [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("---" if i == 0 else "--:" for i in range(len(headers))) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines) + f"\n\n{notes}\n"
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out) + f"\n{notes}\n"
