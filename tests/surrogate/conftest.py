"""Make the helper modules of this folder importable (``_specs``, ``_accuracy``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
