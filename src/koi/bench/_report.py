"""PNG plots like the paper's figures and a ``report.md`` that embeds them (extra ``report``).

matplotlib is imported lazily, with the non-interactive Agg backend; without it
:func:`write_report` writes the Markdown table only.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from koi.bench._claims import claims, format_claims
from koi.bench._table import format_table

__all__ = ["mean_series", "plots_available", "write_report"]


def plots_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def mean_series(runs: Sequence[Mapping[str, Any]], planner: str, key: str) -> list[float]:
    """``key``'s time series averaged over the planner's seeds (same tick grid per seed)."""
    series = [r["series"].get(key) for r in runs if r["planner"] == planner]
    series = [s for s in series if s]
    if not series:
        return []
    n = min(len(s) for s in series)
    return [sum(float(s[i] or 0.0) for s in series) / len(series) for i in range(n)]


def _calibration(runs: Sequence[Mapping[str, Any]], planner: str, key: str) -> list[float]:
    rows = [r["calibration"] for r in runs if r["planner"] == planner and r.get("calibration")]
    if not rows:
        return []
    n = min(len(c) for c in rows)
    out = []
    for i in range(n):
        vals = [c[i].get(key) for c in rows if c[i].get(key) is not None]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def write_report(result: Any, out_dir: str | Path) -> list[Path]:
    """Write ``report.md`` (and the PNGs when matplotlib is importable) to ``out_dir``.

    Plots: goodput over time per planner; TTFT and TPOT attainment over time; fleet allocation
    by GPU type over time per planner; koi's calibration (mean edge uncertainty, ε, band
    coverage) over time; swaps vs keeps per planner.  Series are means over seeds.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    images: list[tuple[str, str]] = []
    if plots_available():
        images = _plots(result, out)
        written += [out / f for f, _ in images]
    md = [
        f"# koi bench — {result.scenario}",
        "",
        (
            f"Seeds: {list(result.seeds)}; planners: {', '.join(result.planners)}; "
            f"wall time {result.wall_s:.0f} s."
        ),
        "",
        format_table(result.summary, markdown=True),
    ]
    rows = claims(result.summary)
    if rows:
        md += ["## koi per metric", "", format_claims(rows, markdown=True)]
    for fname, caption in images:
        md += [f"## {caption}", "", f"![{caption}]({fname})", ""]
    if not images:
        md += ["(Plots need matplotlib: `pip install koi[report]`.)", ""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    written.append(path)
    return written


def _plots(result: Any, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, planners = result.runs, list(result.planners)
    images: list[tuple[str, str]] = []

    def hours(planner: str) -> list[float]:
        return [t / 3600.0 for t in mean_series(runs, planner, "time_s")]

    # Goodput over time.
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for p in planners:
        ax.plot(hours(p), mean_series(runs, p, "goodput_tok_s"), label=p, lw=2 if p == "koi" else 1)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("online SLO goodput (tok/s)")
    ax.set_title(f"{result.scenario}: SLO-honouring goodput over time")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "goodput.png", dpi=110)
    plt.close(fig)
    images.append(("goodput.png", "Goodput over time"))

    # SLO attainment over time.
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, title in zip(
        axes, ("ttft_attainment", "tpot_attainment"), ("TTFT", "TPOT"), strict=True
    ):
        for p in planners:
            ax.plot(hours(p), mean_series(runs, p, key), label=p, lw=2 if p == "koi" else 1)
        ax.set_title(f"{title} SLO attainment per window")
        ax.set_xlabel("time (h)")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("fraction of offered requests")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "slo_attainment.png", dpi=110)
    plt.close(fig)
    images.append(("slo_attainment.png", "SLO attainment over time"))

    # Allocation by GPU type over time, one panel per planner.
    types = sorted({k.split(":", 1)[1] for r in runs for k in r["series"] if k.startswith("gpus:")})
    cols = 4
    rows = max(1, -(-len(planners) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for i, p in enumerate(planners):
        ax = axes[i // cols][i % cols]
        t = hours(p)
        stack = [mean_series(runs, p, f"gpus:{g}") or [0.0] * len(t) for g in types]
        stack = [s[: len(t)] + [0.0] * (len(t) - len(s)) for s in stack]
        if t:
            ax.stackplot(t, stack, labels=types)
        ax.set_title(p, fontsize=9)
        ax.tick_params(labelsize=7)
    for j in range(len(planners), rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].set_ylabel("GPUs held")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower right", fontsize=7, ncol=3)
    fig.suptitle(f"{result.scenario}: fleet allocation by GPU type (h)")
    fig.tight_layout()
    fig.savefig(out / "allocation.png", dpi=100)
    plt.close(fig)
    images.append(("allocation.png", "Fleet allocation by GPU type over time"))

    # Calibration of koi (and its ablations, when present).
    koi_like = [p for p in planners if p.startswith("koi")]
    if koi_like:
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        keys = (
            ("mean_uncertainty", "mean edge uncertainty U"),
            ("epsilon", "DRO radius ε"),
            ("coverage", "risk-band coverage"),
        )
        for ax, (key, title) in zip(axes, keys, strict=True):
            for p in koi_like:
                y = _calibration(runs, p, key)
                ax.plot(hours(p)[: len(y)], y, label=p)
            ax.set_title(title)
            ax.set_xlabel("time (h)")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "calibration.png", dpi=110)
        plt.close(fig)
        images.append(("calibration.png", "Calibration over time (koi)"))

    # Swaps vs keeps.
    fig, ax = plt.subplots(figsize=(9, 3.8))
    xs = range(len(planners))
    swaps = [result.summary[p].get("swaps") or 0.0 for p in planners]
    keeps = [result.summary[p].get("keeps") or 0.0 for p in planners]
    ax.bar([x - 0.2 for x in xs], swaps, width=0.4, label="swaps")
    ax.bar([x + 0.2 for x in xs], keeps, width=0.4, label="keeps")
    ax.set_xticks(list(xs), planners, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("symlog")
    ax.set_ylabel("per run (mean over seeds)")
    ax.set_title("Reconfigurations (swaps) vs keeps")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "swaps_keeps.png", dpi=110)
    plt.close(fig)
    images.append(("swaps_keeps.png", "Swaps vs keeps"))
    return images
