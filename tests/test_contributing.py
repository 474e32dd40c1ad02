"""CONTRIBUTING.md's worked example, run as written: in a copy of the repository, its
shell commands in order (scaffold a missing op, regenerate, run its OpInfo tests,
check), its code blocks put in place of the stubs, the scaffold's report compared with
the one the document shows, and the new op against PyTorch CPU. Also: the missing-op
error it quotes is the one the runtime raises."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import xla_native_functions as xnf

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "CONTRIBUTING.md"


def copy_repo(dst: Path) -> Path:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache"))
    return dst


def example_blocks() -> list[tuple[str, str]]:
    """(language, text) of the fenced blocks between the example markers, in order."""
    text = DOC.read_text()
    body = text[text.index("<!-- example:start -->"):text.index("<!-- example:end -->")]
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", body, re.S)]


def _normalize(report: str) -> list[str]:
    """A report without line numbers (they move as the files change)."""
    return [re.sub(r":\d+", ":N", line).rstrip() for line in report.strip().splitlines()]


def replace_function(path: Path, code: str) -> None:
    """Put `code` (one top-level function) in place of the function of the same name."""
    name = re.search(r"^def (\w+)\(", code, re.M).group(1)
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {name}("))
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines[start:end] = [code.rstrip("\n") + "\n"]
    path.write_text("".join(lines))


def test_the_worked_example_runs_as_written(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    listed = (repo / "native_functions.yaml").read_text()
    assert "bucketize.Scalar" not in listed, (
        "aten::bucketize.Scalar is in the manifest now: CONTRIBUTING.md's worked example needs another missing op")
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    last_output = ""
    ran = []
    for lang, block in example_blocks():
        if lang == "bash":
            for command in block.strip().splitlines():
                args = command.split()
                assert args[0] == "python", command
                run = subprocess.run(
                    [sys.executable, *args[1:]] + (["-p", "no:cacheprovider"] if "pytest" in args else []),
                    cwd=repo,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                assert run.returncode == 0, f"`{command}` failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
                last_output = run.stdout
                ran.append(command)
        elif lang == "python":
            header, _, code = block.partition("\n")
            target = repo / header.removeprefix("# ").strip()
            assert target.is_file(), header
            replace_function(target, code)
        else:  # the report the previous command printed
            assert _normalize(last_output)[:len(_normalize(block))] == _normalize(block), (
                f"the scaffold's report differs from CONTRIBUTING.md's:\n{last_output}")
    assert any("scaffold" in c for c in ran) and any("pytest" in c for c in ran) and ran[-2].endswith("--check")
    assert "section: full_codegen" in last_output and "UNFINISHED" not in last_output
    # the op now runs on its lowering, as the debugging section's test asserts
    program = textwrap.dedent("""
        import sys
        sys.path.insert(0, ".")
        from codegen.repo_import import use_repo
        use_repo(".")
        import torch, xla_native_functions as xnf
        boundaries = torch.tensor([0.0, 1.0, 2.5, 4.0])
        xnf.metrics.reset()
        for value in (2.5, 3, -1.0, True):
            for right in (False, True):
                for out_int32 in (False, True):
                    got = torch.bucketize(value, xnf.to_xla(boundaries), right=right, out_int32=out_int32)
                    want = torch.bucketize(value, boundaries, right=right, out_int32=out_int32)
                    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
                    assert torch.equal(xnf.to_torch(got), want), (value, right, got, want)
        assert xnf.metrics.counters(section=True)["aten::bucketize.Scalar"].section == "full_codegen"
        assert not xnf.metrics.executed_fallback_ops()
        print("ok")
    """)
    run = subprocess.run(
        [sys.executable, "-c", program], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
    # three handwritten files besides the manifest: the lowering, the shape function, the test table
    changed = sorted(str(p.relative_to(repo)) for p in repo.rglob("*.py")
                     if "generated" not in p.parts and "__pycache__" not in p.parts
                     and p.read_bytes() != (ROOT / p.relative_to(repo)).read_bytes())
    assert changed == ["lowerings/distance.py", "shape_fns/distance.py", "tests/test_opinfo.py"]


def test_the_quoted_missing_op_error_is_the_runtimes():
    if "bucketize.Scalar" in (ROOT / "native_functions.yaml").read_text():
        pytest.skip("aten::bucketize.Scalar is listed now; the example needs another op")
    text = DOC.read_text()
    quoted = text[text.index("xla_native_functions.OperatorNotFound: aten operator"):]
    quoted = " ".join(quoted[:quoted.index("```")].split())
    with pytest.raises(xnf.OperatorNotFound) as info:
        torch.bucketize(2.5, xnf.to_xla(torch.tensor([0.0, 1.0, 2.5, 4.0])))
    message = re.sub(r"called from .+?\)\. To support", "called from train.py:42 (step). To support", str(info.value))
    assert quoted == "xla_native_functions.OperatorNotFound: " + " ".join(message.split())
