"""Setup shared by every test: the tests import the package of the checkout they are in
(codegen/repo_import.py), whichever copy is installed, so a copy of the repository tests
itself; the repository root is importable (the generator, `codegen`, is run from the
checkout, not installed) and so is scripts/ (the model zoo, the report scripts). Shared
helpers live in modules of their own, never in test modules: lowering_harness.py
(running lowerings and shape functions against PyTorch, and the checks every family's
test file makes), opinfo_harness.py (PyTorch's OpInfo samples, the sweep's engine),
opinfo_samples.py (single OpInfo samples on our tensors), module_harness.py (PyTorch's
module_db, with its table module_db_skips.py), codegen_harness.py (the generator's
synthetic manifests) and training_steps.py (the small training step the fault tests and
scripts/soak.py drive compile() with)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Every first call of an op compiles and runs our lowering, as it did before first calls
# could run on PyTorch CPU (Note [First calls on PyTorch CPU]): the tests compare the
# lowerings with PyTorch. tests/test_first_call.py turns it on where it tests it.
os.environ.setdefault("XLA_NATIVE_FUNCTIONS_FIRST_CALLS_ON_CPU", "0")

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT / "scripts", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from codegen.repo_import import use_repo  # noqa: E402

use_repo(ROOT)


@pytest.fixture
def compiled_first_calls():
    """Every new signature compiles before its first call returns, whatever the
    environment says: for tests that watch the compiled path (donation, graph rewrites,
    cache counts, bitwise equal runs) from a signature's first call on."""
    import xla_native_functions as xnf

    before = xnf.config.first_calls_on_cpu
    xnf.config.first_calls_on_cpu = False
    xnf.wait_for_background_compiles()  # earlier tests' compiles must not land (or evict) during this one
    yield
    xnf.config.first_calls_on_cpu = before


@pytest.fixture
def fresh_graph_cache(monkeypatch):
    """An empty graph cache and zeroed metrics, so counts of traces, compiles and
    replays start from this test (the replay tests opt in with `pytestmark`)."""
    import xla_native_functions as xnf
    from xla_native_functions.runtime.exec import graph

    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})
    monkeypatch.setattr(graph, "_TRANSPOSED_COPIES", {})
    xnf.reset_metrics()
