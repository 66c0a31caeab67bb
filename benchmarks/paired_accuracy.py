"""Is one revision's median error really different from another's?  A paired bootstrap.

    .venv/bin/python benchmarks/accuracy.py --split heldout --dump new.json
    (the same on the other revision: --dump old.json)
    .venv/bin/python benchmarks/paired_accuracy.py old.json new.json [--resamples 4000]

Pairs the rows both dumps scored (same source, deployment and measured values), resamples the
rows with replacement and prints, per metric as JSON, both medians of the absolute percentage
error, their difference (new − old), its 95 % interval and the share of resamples in which
the new median is the larger.  A difference whose interval straddles zero is not one the
measurements can tell apart.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

Errors = dict[str, dict[str, float]]


def paired(old: Errors, new: Errors, resamples: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    keys = sorted(set(old) & set(new))
    metrics = sorted({m for k in keys for m in old[k]} & {m for k in keys for m in new[k]})
    rng = np.random.default_rng(0)
    for m in metrics:
        pairs = [(old[k][m], new[k][m]) for k in keys if m in old[k] and m in new[k]]
        a, b = (np.array(col) for col in zip(*pairs, strict=True))
        idx = rng.integers(0, len(a), size=(resamples, len(a)))
        diff = np.median(b[idx], axis=1) - np.median(a[idx], axis=1)
        lo, hi = np.percentile(diff, [2.5, 97.5])
        out[m] = {
            "rows": len(a),
            "old_median": round(float(np.median(a)), 2),
            "new_median": round(float(np.median(b)), 2),
            "difference": round(float(np.median(b) - np.median(a)), 2),
            "interval_95": [round(float(lo), 2), round(float(hi), 2)],
            "share_new_larger": round(float((diff > 0).mean()), 3),
            "rows_worse": int((b > a).sum()),
            "rows_better": int((b < a).sum()),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--resamples", type=int, default=4000)
    args = ap.parse_args()
    old, new = (json.loads(p.read_text()) for p in (args.old, args.new))
    print(json.dumps(paired(old, new, args.resamples), indent=2))


if __name__ == "__main__":
    main()
