"""`python -m codegen.scaffold` in a copy of the repository: the manifest entry in sorted
position, stubs with the schema's parameters that import and raise until filled in,
the generator naming them (a warning; an error with --check), the test table, the
sections, an explicit family, operators of another namespace, and its refusals."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codegen.manifest import lint_order, load_manifest  # noqa: E402
from codegen.schemas import load_schema_database  # noqa: E402

# CONTRIBUTING.md's worked example adds this one; the tests here take others.
EXAMPLE_OP = "__lshift__.Tensor"


def copy_repo(dst: Path) -> Path:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache"))
    return dst


def missing_pointwise_ops() -> list[str]:
    """Functional pointwise aten ops the manifest does not list (today: the shift
    operators' legacy names)."""
    db = load_schema_database()
    listed = {e.op for e in load_manifest(ROOT / "native_functions.yaml").entries}
    return sorted(n for n, r in db.records.items() if r.kind == "functional" and not r.composite_implicit
                  and "pointwise" in r.tags and n not in listed and n != EXAMPLE_OP)


def run(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=repo, capture_output=True, text=True, timeout=600,
                          env=env)


def in_repo(repo: Path, code: str) -> subprocess.CompletedProcess:
    """Run Python with the copy's package imported."""
    program = "import sys\nsys.path.insert(0, '.')\nfrom codegen.repo_import import use_repo\nuse_repo('.')\n"
    return subprocess.run([sys.executable, "-c", program + textwrap.dedent(code)], cwd=repo, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def repo(tmp_path):
    return copy_repo(tmp_path / "repo")


@pytest.fixture
def two_ops():
    ops = [op for op in missing_pointwise_ops() if op.startswith("__")]
    if len(ops) < 2:
        pytest.skip("fewer than two unlisted pointwise operators left to scaffold")
    return ops[:2]


def test_scaffold_full_codegen_op_until_filled_in(repo, two_ops):
    op = two_ops[0]
    name = op.replace(".", "_")
    result = run(repo, "codegen.scaffold", f"aten::{op}")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    manifest = load_manifest(repo / "native_functions.yaml")
    assert [e.section for e in manifest.entries if e.op == op] == ["full_codegen"]
    assert lint_order(manifest) == []  # sorted position
    family = re.search(r"family: (\w+) \(guessed: where (?:its other overload )?aten::([\w.]+)", out)
    assert family, out
    lowering = repo / "lowerings" / f"{family.group(1)}.py"
    shape = repo / "shape_fns" / f"{family.group(1)}.py"
    assert f"def lower_{name}(self, other):" in lowering.read_text()
    assert f"def {name}_output_shape(self, other):" in shape.read_text()
    assert re.search(rf"lowerings/{family.group(1)}\.py:\d+  def lower_{name}\(self, other\):", out)
    # the OpInfo whose Python operator reaches it joins the test table
    assert re.search(
        r'OPINFOS = \[.*"bitwise_(left|right)_shift",\n\]', (repo / "tests/test_opinfo.py").read_text(), re.S
    )
    # the generator names the stubs until they are filled in; --check fails on them
    gen = run(repo, "codegen.generate")
    assert gen.returncode == 0, gen.stderr
    assert "2 handwritten function(s) are unfinished stubs" in gen.stderr
    assert f"lowerings/{family.group(1)}.py:" in gen.stderr and f"lower_{name}" in gen.stderr
    check = run(repo, "codegen.generate", "--check")
    assert check.returncode == 1 and "2 unfinished stub(s)" in check.stderr
    # the stubs import, and the op says it is unfinished
    symbol = "<<" if "lshift" in op else ">>"
    other = "1" if op.endswith("Scalar") else "xnf.to_xla(torch.tensor([1, 1]))"
    call = in_repo(repo, f"""
        import torch, xla_native_functions as xnf
        try:
            xnf.to_xla(torch.tensor([4, 8])) {symbol} {other}
        except NotImplementedError as e:
            print(e)
    """)
    assert call.returncode == 0 and call.stdout.startswith("unfinished: "), call.stderr[-2000:]
    # filled in: the generator is quiet, the op runs
    twin = family.group(2).replace(".", "_")
    for path, old, new in (
        (lowering, f"lower_{name}", f"lower_{twin}"),
        (shape, f"{name}_output_shape", f"{twin}_output_shape"),
    ):
        text = path.read_text()
        start = text.index(f"def {old}(")
        path.write_text(text[:start] + f"def {old}(self, other):\n    return {new}(self, other)\n")
    gen = run(repo, "codegen.generate")
    assert gen.returncode == 0 and "unfinished" not in gen.stderr, gen.stderr
    assert run(repo, "codegen.generate", "--check").returncode == 0
    call = in_repo(repo, f"""
        import torch, xla_native_functions as xnf
        x, y = torch.tensor([4, 8]), {other.replace("xnf.to_xla(", "(")}
        print(torch.equal(xnf.to_torch(xnf.to_xla(x) {symbol} {other}), x {symbol} y))
    """)
    assert call.stdout.strip() == "True", call.stderr[-2000:]


def test_supported_and_fallback_sections(repo, two_ops):
    supported, fallback = two_ops
    out = run(repo, "codegen.scaffold", f"aten::{supported}", "--section", "supported")
    assert out.returncode == 0, out.stderr
    name = supported.replace(".", "_")
    where = re.search(r"(runtime/supported/\w+\.py):\d+  def impl_" + name, out.stdout)
    assert where, out.stdout
    assert f"def impl_{name}(self, other):" in (repo / where.group(1)).read_text()
    out = run(repo, "codegen.scaffold", f"aten::{fallback}", "--section", "fallback")
    assert out.returncode == 0 and "stubs" not in out.stdout, out.stdout
    manifest = load_manifest(repo / "native_functions.yaml")
    assert {e.op: e.section for e in manifest.entries if e.op in two_ops} == {
        supported: "supported",
        fallback: "fallback",
    }
    assert lint_order(manifest) == []
    gen = run(repo, "codegen.generate")
    assert gen.returncode == 0 and "1 handwritten function(s) are unfinished" in gen.stderr, gen.stderr
    # the fallback entry runs on PyTorch CPU, and says so
    symbol = "<<" if "lshift" in fallback else ">>"
    other = "1" if fallback.endswith("Scalar") else "torch.tensor([1, 1])"
    call = in_repo(repo, f"""
        import torch, xla_native_functions as xnf
        x = torch.tensor([4, 8])
        xnf.metrics.reset()
        got = xnf.to_torch(xnf.to_xla(x) {symbol} xnf.to_xla({other}))
        print(torch.equal(got, x {symbol} {other}), xnf.metrics.executed_fallback_ops())
    """.replace("xnf.to_xla(1)", "1"))
    assert call.stdout.strip() == f"True ['aten::{fallback}']", call.stderr[-2000:]


def test_explicit_family_makes_new_modules(repo, two_ops):
    out = run(repo, "codegen.scaffold", f"aten::{two_ops[0]}", "--family", "shifts")
    assert out.returncode == 0 and "family: shifts (--family shifts)" in out.stdout, out.stdout + out.stderr
    for folder in ("lowerings", "shape_fns"):
        text = (repo / folder / "shifts.py").read_text()
        assert text.startswith('"""') and "from __future__ import annotations" in text and "unfinished: " in text
    assert run(repo, "codegen.generate").returncode == 0


def test_operator_of_another_namespace(repo):
    env = dict(os.environ, PYTHONPATH=str(repo / "tests"))
    out = run(repo, "codegen.scaffold", "testlib::halves", env=env)
    assert out.returncode == 1 and "pass --library-module MODULE" in out.stderr
    out = run(repo, "codegen.scaffold", "testlib::halves", "--library-module", "custom_op_library", env=env)
    assert out.returncode == 0, out.stderr
    text = (repo / "native_functions.yaml").read_text()
    assert "libraries:\n  testlib: custom_op_library\n" in text
    manifest = load_manifest(repo / "native_functions.yaml")
    assert [(e.op, e.section) for e in manifest.entries if "::" in e.op] == [("testlib::halves", "full_codegen")]
    assert "def lower_testlib_halves(x, dim):" in (repo / "lowerings" / "testlib.py").read_text()
    assert "def testlib_halves_output_shape(x, dim):" in (repo / "shape_fns" / "testlib.py").read_text()
    gen = run(repo, "codegen.generate", env=env)
    assert gen.returncode == 0 and "unfinished stubs" in gen.stderr, gen.stderr
    # a second op of the namespace uses the library entry already there
    out = run(repo, "codegen.scaffold", "testlib::halfs", env=env)
    assert out.returncode == 1 and "did you mean testlib::halves" in out.stderr, out.stderr
    out = run(repo, "codegen.scaffold", "testlib::scaled_tanh", env=env)
    assert out.returncode == 0, out.stderr
    assert (repo / "native_functions.yaml").read_text().count("testlib: custom_op_library") == 1


@pytest.mark.parametrize("op, message", [
    ("aten::abs", "aten::abs is already listed under 'full_codegen' (native_functions.yaml:"),
    ("aten::abss", "unknown aten operator 'aten::abss' (torch "),
    ("aten::abss", "did you mean aten::abs"),
    ("aten::add_.Tensor", "aten::add_.Tensor is the inplace form of aten::add.Tensor (already listed under "
                          "'full_codegen'); scaffold aten::add.Tensor instead"),
    ("aten::dropout", "aten::dropout is CompositeImplicitAutograd"),
    ("aten::add.Tensorr", "its overloads are aten::add.Scalar, aten::add.Tensor"),
    ("add(", "'add(' is not an operator name"),
])
def test_refusals_change_nothing(repo, op, message):
    before = {p: p.read_bytes() for p in (repo / "native_functions.yaml", repo / "tests" / "test_opinfo.py")}
    out = run(repo, "codegen.scaffold", op)
    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert all(p.read_bytes() == data for p, data in before.items())
