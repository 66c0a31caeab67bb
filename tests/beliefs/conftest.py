"""Make the shared evidence fixtures (``tests/dag/_evidence_fixtures.py``) importable."""

from __future__ import annotations

import sys
from pathlib import Path

_DAG_TESTS = str(Path(__file__).resolve().parent.parent / "dag")
if _DAG_TESTS not in sys.path:
    sys.path.insert(0, _DAG_TESTS)
