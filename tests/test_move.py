"""`python -m codegen.move` and `python -m codegen.snapshot` in a copy of the repository:
a move that keeps behaviour goes through; implementations with a planted change (a
dtype, a stride, an exception type, an alias) and the classic cholesky case (a
straightforward lowering that returns NaN where PyTorch raises) are caught, printed and
rolled back, leaving the manifest and generated code byte for byte as they were.

To keep this short the snapshots run one small OpInfo (`neg`: its samples, error
inputs and variants) in two dtypes, eager and compiled; the commands' defaults run
more (CONTRIBUTING.md)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path("generated") / "xla_native_functions"
NEG = ["--max-opinfos", "1", "--dtypes", "float32,int64", "--modes", "eager,compiled"]

# neg as a `supported` op: its own node running the same lowering, then PLANT
PLANTED = '''"""neg as a supported op, for tests/test_move.py."""

import torch

from ...lowerings.pointwise import lower_neg
from ...shape_fns.pointwise import neg_output_shape
from ..core.ir import TENSOR, Node
from ..exec.eager import run_node


class PlantedNeg(Node):
    __slots__ = ()
    op = name = "planted_neg"
    arg_kinds = (TENSOR,)
    lower = staticmethod(lower_neg)
    output_shape = staticmethod(neg_output_shape)


def impl_neg(self):
    PLANT
    return run_node(PlantedNeg, (self,))
'''

PLANTS = {
    "dtype": (
        "if self.dtype == torch.float32:\n        return run_node(PlantedNeg, (self,)).double()",
        "output 0 dtype: float32 -> float64",
    ),
    "stride": (
        "if self.dim() == 2:\n        return run_node(PlantedNeg, (self,)).t().contiguous().t()",
        "output 0 stride: [",
    ),
    "error type": (
        "if self.dtype == torch.bool:\n        raise TypeError('planted')",
        "raised RuntimeError -> TypeError",
    ),
    "alias": (
        "if self.dtype == torch.int64 and self.numel() and not bool(self.any()):\n        return self",
        "output 0 aliasing: a new tensor -> argument 0",
    ),
}


def copy_repo(dst: Path) -> Path:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache"))
    return dst


def state(repo: Path) -> dict[str, bytes]:
    files = {"native_functions.yaml": (repo / "native_functions.yaml").read_bytes()}
    for p in sorted((repo / PACKAGE).iterdir()):
        if p.is_file():
            files[str(p.relative_to(repo))] = p.read_bytes()
    return files


def command(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=repo, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("move") / "repo")


@pytest.fixture(scope="module")
def neg_before(repo):
    """The snapshot of neg before any move (taken once)."""
    before = repo / "neg-before.json"
    snap = command(repo, "codegen.snapshot", "--ops", "aten::neg", *NEG, "--out", str(before))
    assert snap.returncode == 0, snap.stderr
    return before


def test_planted_changes_are_caught_and_rolled_back_and_a_clean_move_passes(repo, neg_before):
    before = neg_before
    records = json.loads(before.read_text())["records"]
    assert any("raised" in r for r in records.values()), "the snapshot needs an error input"
    assert any(r.get("outputs") and len(r["outputs"][0]["shape"]) == 2 for r in records.values())
    assert any(k.endswith("|zeros") and "|int64|" in k for k in records)
    original = state(repo)
    planted = repo / "runtime" / "supported" / "planted_neg.py"
    for what, (plant, expected) in PLANTS.items():
        planted.write_text(PLANTED.replace("PLANT", plant))
        moved = command(repo, "codegen.move", "aten::neg", "--to", "supported", *NEG, "--before", str(before))
        assert moved.returncode == 1, f"the {what} change was not caught:\n{moved.stdout}\n{moved.stderr}"
        assert expected in moved.stdout, f"{what}:\n{moved.stdout}"
        assert "put back: native_functions.yaml and generated/xla_native_functions are as they were" in moved.stdout
        assert state(repo) == original, f"{what}: files were not put back"
    # the same implementation without a plant: no difference, the move stays
    planted.write_text(PLANTED.replace("PLANT", "pass"))
    moved = command(repo, "codegen.move", "aten::neg", "--to", "supported", *NEG, "--before", str(before))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "no behaviour change:" in moved.stdout
    assert "  - neg\n" in (repo / "native_functions.yaml").read_text().split("supported:")[1]
    assert "impl_neg" in (repo / PACKAGE / "ir.py").read_text()
    assert command(repo, "codegen.generate", "--check").returncode == 0


def test_cholesky_to_full_codegen_is_refused(repo):
    """A matrix that is not positive-definite raised LinAlgError; a straightforward
    lowering returns NaNs instead."""
    with open(repo / "lowerings" / "linalg.py", "a") as f:
        f.write(textwrap.dedent("""

            def lower_cholesky(self, upper=False):
                factor = jnp.linalg.cholesky(self)
                return jnp.conj(jnp.swapaxes(factor, -1, -2)) if upper else factor
        """))
    with open(repo / "shape_fns" / "linalg.py", "a") as f:
        f.write("\n\ndef cholesky_output_shape(self, upper=False):\n    return TensorMeta(self.shape, self.dtype)\n")
    original = state(repo)
    moved = command(repo, "codegen.move", "aten::cholesky", "--to", "full_codegen", "--dtypes", "float32",
                    "--modes", "eager", "--rtol", "1e-5", "--atol", "1e-6")
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "cholesky float32 eager 0 negated: raised torch._C._LinAlgError" in moved.stdout
    assert "-> returned float32[5, 5] ['nan'" in moved.stdout
    assert state(repo) == original


def test_move_refusals(repo):
    original = state(repo)
    cases = [
        (["aten::abs", "--to", "full_codegen"], "aten::abs is in 'full_codegen' already"),
        (["aten::bucketize.Scalar", "--to", "supported"], "is not in the manifest; `python -m codegen.scaffold"),
        (["aten::sinh", "--to", "supported"], "cannot move to 'supported' yet; nothing was changed"),
    ]
    for args, message in cases:
        moved = command(repo, "codegen.move", *args)
        assert moved.returncode == 1 and message in moved.stderr, moved.stderr
    # the generator's message names the function the new section needs
    moved = command(repo, "codegen.move", "aten::sinh", "--to", "supported")
    assert "def impl_sinh(self):" in moved.stderr
    assert state(repo) == original


def test_snapshot_diff(repo, neg_before, tmp_path):
    """--diff of a snapshot with itself is clean; a changed record is reported."""
    snap = neg_before
    same = command(repo, "codegen.snapshot", "--diff", str(snap), str(snap))
    assert same.returncode == 0 and same.stdout.startswith("no difference:")
    data = json.loads(snap.read_text())
    key = next(k for k, r in data["records"].items() if r.get("outputs"))
    data["records"][key]["outputs"][0]["values"] = "0" * 20
    data["records"][key]["outputs"][0]["data"][0] += 1.0
    changed = tmp_path / "b.json"
    changed.write_text(json.dumps(data))
    diff = command(repo, "codegen.snapshot", "--diff", str(snap), str(changed))
    assert diff.returncode == 1 and "1 difference(s)" in diff.stdout and "max abs difference 1" in diff.stdout
    tolerant = command(repo, "codegen.snapshot", "--diff", str(snap), str(changed), "--atol", "2")
    assert tolerant.returncode == 0


def test_ctrl_c_during_the_check_puts_files_back(repo, neg_before):
    """Interrupted while it checks the moved op, the move restores the manifest and the
    generated code (and stops its snapshot worker)."""
    planted = repo / "runtime" / "supported" / "planted_neg.py"
    planted.write_text(PLANTED.replace("PLANT", "pass"))
    manifest = (repo / "native_functions.yaml").read_text()
    to = "full_codegen" if "  - neg\n" in manifest.split("supported:")[1] else "supported"
    original = state(repo)
    # Ctrl-C as in a terminal, also where this test runs with SIGINT ignored (a background job)
    proc = subprocess.Popen([sys.executable, "-m", "codegen.move", "aten::neg", "--to", to, *NEG, "--before",
                             str(neg_before)], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "regenerated; after: snapshot" in line:
            assert state(repo) != original  # moved: the check is running
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(seen) + out + err
    assert "put back: native_functions.yaml and generated/xla_native_functions are as they were" in out
    assert "interrupted" in err
    assert state(repo) == original
