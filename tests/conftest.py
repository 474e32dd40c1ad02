"""Setup shared by every test: the repository root is importable (the generator,
`codegen`, is run from the checkout, not installed) and so is scripts/ (the model zoo,
the report scripts). Shared helpers live in modules of their own, never in test
modules: lowering_harness.py (running lowerings and shape functions against PyTorch),
opinfo_harness.py (PyTorch's OpInfo samples) and codegen_harness.py (the generator's
synthetic manifests)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO / "scripts", REPO):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
