"""What `python -m codegen.generate` does to its output directory when things go wrong:
it replaces only trees it wrote, a kill at any point leaves a complete package (or one
the next run puts back) and no leftovers, two generators at once take turns, and a
read-only place or a bad manifest leaves everything byte-identical.

Runs that are killed, raced or put on a read-only mount are subprocesses. The pause
points of the write path (codegen.generate.PAUSE_POINTS, enabled by the test-only
variable XLA_NATIVE_FUNCTIONS_GENERATE_PAUSE_AT) let a test kill the generator at each
step; XLA_NATIVE_FUNCTIONS_GENERATE_SWAP=rename forces the two-rename swap used where
directories cannot be exchanged atomically.
"""

from __future__ import annotations

import errno
import functools
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from generator_helpers import (
    GOOD_MANIFEST,
    NEXT_MANIFEST,
    PAUSE_ENV,
    PAUSE_POINTS,
    REPO,
    SWAP_ENV,
    assert_clean_error,
    copy_tree,
    encoded,
    files_of,
    gen,
    generator_command,
    make_root,
    run_generator,
    start_generator,
    tree_hash,
    wait_for_line,
    write_manifest,
)
from codegen_harness import LOWERINGS

GENERATED = REPO / "generated" / "xla_native_functions"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "root")


def run_main(monkeypatch, root: Path, *argv: str) -> int:
    monkeypatch.setattr(gen, "render", functools.partial(gen.render, root=root))
    return gen.main([str(a) for a in argv])


def leftovers(parent: Path, keep: str = "pkg") -> list[str]:
    return sorted(n for n in os.listdir(parent) if n != keep)


@pytest.fixture
def trees(tmp_path, root):
    """An output `out/pkg` holding the tree of GOOD_MANIFEST, and the tree NEXT_MANIFEST
    renders (what a run must swap in)."""
    old_manifest = write_manifest(tmp_path, GOOD_MANIFEST, "old.yaml")
    manifest = write_manifest(tmp_path, NEXT_MANIFEST, "manifest.yaml")
    out = tmp_path / "out" / "pkg"
    old = gen.render(old_manifest, root=root).files
    new = gen.render(manifest, root=root).files
    gen.write_atomically(old, out)
    return manifest, out, encoded(old), encoded(new)


# ------------------------------------------------------------ 1. foreign trees are refused


def test_refuses_to_replace_the_runtime_directory(tmp_path):
    """`--out runtime` once replaced the 29 handwritten runtime files and exited 0."""
    runtime = copy_tree(REPO / "runtime", tmp_path / "runtime")
    before = tree_hash(runtime)
    proc = run_generator(None, "--out", runtime)
    line = assert_clean_error(proc, f"error: {runtime}: refusing to replace a directory this generator did not write (")
    assert line.endswith(
        " and more; only files starting with '# @generated' are replaced); "
        "nothing was changed. Pass --out a new or empty directory or one this generator wrote, or move those out"
    )
    assert tree_hash(runtime) == before
    assert sorted(os.listdir(tmp_path)) == ["runtime"]


def test_refuses_to_replace_a_file(tmp_path, root, monkeypatch, capsys):
    """`--out README.md` once turned the file into a directory."""
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    before = readme.read_bytes()
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", readme) == 1
    assert capsys.readouterr().err == (
        f"error: {readme}: exists and is not a directory; refusing to replace it with the generated package. "
        "Pass --out a new directory or one this generator wrote\n"
    )
    assert readme.is_file() and readme.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["README.md", "manifest.yaml", "root"]


def test_refuses_a_generated_tree_holding_one_foreign_file(trees, root, monkeypatch, capsys):
    manifest, out, old, _ = trees
    (out / "notes.md").write_text("my notes\n")
    before = tree_hash(out)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 1
    assert capsys.readouterr().err.startswith(
        f"error: {out}: refusing to replace a directory this generator did not write (it holds notes.md; "
    )
    assert tree_hash(out) == before
    assert leftovers(out.parent) == []


def test_refuses_a_symbolic_link(trees, root, monkeypatch, capsys):
    manifest, out, _, _ = trees
    link = out.parent / "link"
    link.symlink_to(out)
    before = tree_hash(out)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", link) == 1
    assert capsys.readouterr().err.startswith(f"error: {link}: is a symbolic link; refusing to replace it.")
    assert link.is_symlink() and tree_hash(out) == before


def test_refuses_a_tree_holding_a_symbolic_link(trees, root, monkeypatch, capsys):
    manifest, out, _, _ = trees
    (out / "elsewhere").symlink_to(REPO / "runtime")
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 1
    assert "(it holds elsewhere; " in capsys.readouterr().err
    assert (out / "elsewhere").is_symlink()


def test_refuses_the_parent_of_a_generated_package(tmp_path, root, monkeypatch, capsys):
    """`--out generated` holds only generated files, but in a package the new tree does
    not have: replacing it would delete generated/xla_native_functions."""
    generated = copy_tree(GENERATED.parent, tmp_path / "generated")
    before = tree_hash(generated)
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", generated) == 1
    assert capsys.readouterr().err.startswith(
        f"error: {generated}: refusing to replace a directory this generator did not write (it holds "
        "xla_native_functions/; "
    )
    assert tree_hash(generated) == before


def test_refusing_a_huge_directory_reads_little(tmp_path, root, monkeypatch, capsys):
    """A wrong --out is refused at its first few entries, not after reading all of it."""
    big = tmp_path / "big"
    for i in range(20):
        (big / f"d{i}").mkdir(parents=True)
        (big / f"f{i}.bin").write_bytes(b"\0" * 1_000_000)
    opened = []
    real_open = open

    def counting_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", big) == 1
    assert "(it holds d0/, d1/, d10/ and more; " in capsys.readouterr().err
    assert not [f for f in opened if f.startswith(str(big))]


def test_replaces_an_empty_directory_and_its_own_tree(trees, root, monkeypatch, capsys):
    manifest, out, _, new = trees
    (out / "__pycache__").mkdir()  # what importing the package leaves: not foreign
    (out / "__pycache__" / "ir.cpython-311.pyc").write_bytes(b"\0bytecode")
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 0
    assert files_of(out) == new
    empty = out.parent / "empty"
    empty.mkdir()
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", empty) == 0
    assert files_of(empty) == new


# ------------------------------------------------------------ 2. a kill at any point


def check_after_kill(out: Path, old: dict, new: dict, swap: str, point: str | None) -> None:
    """The package right after a SIGKILL: whole (the previous tree or the new one), except
    between the two renames of the fallback swap, where the next run puts it back."""
    state = files_of(out)
    if swap == "rename" and point == "moved-aside":
        assert state is None
    else:
        assert state in (old, new), f"a mixed or partial package after a kill at {point}: {sorted(state or {})}"


def check_next_runs(root: Path, manifest: Path, out: Path, old: dict, new: dict, check: bool = True) -> None:
    """`--check` (if `check`) then a regular run restore a correct tree and leave nothing
    beside it."""
    if check:
        proc = run_generator(root, "--check", "--manifest", manifest, "--out", out)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert files_of(out) in (old, new), proc.stderr
        assert proc.returncode == (0 if files_of(out) == new else 1), proc.stderr
        assert leftovers(out.parent) == [], proc.stderr
    run = run_generator(root, "--manifest", manifest, "--out", out)
    assert run.returncode == 0, run.stderr
    assert files_of(out) == new
    assert leftovers(out.parent) == []


POINTS = [
    *[pytest.param("exchange", p, id=f"exchange-{p}") for p in PAUSE_POINTS if p != "moved-aside"],
    *[pytest.param("rename", p, id=f"rename-{p}") for p in PAUSE_POINTS],
]


@pytest.mark.parametrize("swap, point", POINTS)
def test_kill_at_each_point_of_the_write(root, trees, swap, point):
    manifest, out, old, new = trees
    env = {PAUSE_ENV: point, **({SWAP_ENV: "rename"} if swap == "rename" else {})}
    proc = start_generator(root, "--manifest", manifest, "--out", out, **env)
    wait_for_line(proc, f"paused at {point}")
    check_after_kill(out, old, new, swap, point)  # what a reader sees at that instant
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    check_after_kill(out, old, new, swap, point)
    if point != "locked":
        assert leftovers(out.parent) != []  # the kill did leave something to clean
    check_next_runs(root, manifest, out, old, new)


def test_kill_between_the_renames_is_repaired_before_anything_else(root, trees):
    """The next run puts the previous tree back even when it then fails on the manifest."""
    manifest, out, old, _ = trees
    proc = start_generator(root, "--manifest", manifest, "--out", out, **{PAUSE_ENV: "moved-aside", SWAP_ENV: "rename"})
    wait_for_line(proc, "paused at moved-aside")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not out.exists()
    broken = write_manifest(manifest.parent, NEXT_MANIFEST.replace("median", "mediann"), "broken.yaml")
    run = run_generator(root, "--manifest", broken, "--out", out)
    assert run.returncode == 1
    assert run.stderr.splitlines()[0] == f"restored {out} from the previous run, which was interrupted during its swap"
    assert files_of(out) == old
    assert leftovers(out.parent) == []


def test_leftovers_of_earlier_versions_are_removed(trees, root, monkeypatch):
    """Earlier versions left `.old-<pid>-<name>` and `.staging-XXXXXXXX` behind for good."""
    manifest, out, old, new = trees
    for name in (".old-12345-pkg", ".staging-abcd_123"):
        copy_tree(out, out.parent / name)
    foreign = out.parent / ".staging-zzzzzzzz"  # same pattern, but not generated: kept
    foreign.mkdir()
    (foreign / "mine.txt").write_text("mine\n")
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 0
    assert files_of(out) == new
    assert leftovers(out.parent) == [".staging-zzzzzzzz"]


def test_sigkill_at_random_moments(tmp_path):
    """The real manifest, killed after random delays (biased towards the write at the
    end of a run), in both swap modes; after each kill the next run restores the tree."""
    manifest = REPO / "native_functions.yaml"
    out = tmp_path / "out" / "pkg"
    new = encoded(gen.render(manifest).files)
    old = dict(new)
    old["ops.txt"] = new["ops.txt"] + b"# an older tree\n"
    del old["__init__.py"]
    start = time.perf_counter()
    assert run_generator(None, "--manifest", manifest, "--out", tmp_path / "probe").returncode == 0
    duration = time.perf_counter() - start
    rng = random.Random(20260)
    for i in range(6):
        swap = "rename" if i % 2 else "exchange"
        gen.write_atomically({k: v.decode() for k, v in old.items()}, out)
        delay = rng.uniform(0, duration) if i < 2 else rng.uniform(0.7 * duration, 1.1 * duration)
        env = {SWAP_ENV: "rename"} if swap == "rename" else {}
        proc = start_generator(None, "--manifest", manifest, "--out", out, **env)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        state = files_of(out)
        assert state in (old, new) or (swap == "rename" and state is None), (i, delay)
        check_next_runs(None, manifest, out, old, new, check=i < 2)  # the pause tests cover --check


# ------------------------------------------------------------ 4. two generators at once


def test_second_generator_waits_for_the_first(root, trees):
    manifest, out, old, new = trees
    first = start_generator(root, "--manifest", manifest, "--out", out, **{PAUSE_ENV: "staged"})
    wait_for_line(first, "paused at staged")
    second = start_generator(root, "--manifest", manifest, "--out", out)
    wait_for_line(second, f"waiting for another `python -m codegen.generate` (pid {first.pid}) writing {out}...")
    time.sleep(0.3)
    assert second.poll() is None  # still waiting while the first holds the lock
    first.stdin.write("\n")
    first.stdin.flush()
    out1, err1 = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    assert first.returncode == 0 and out1.startswith(f"wrote {out} "), err1
    assert second.returncode == 0 and out2.startswith(f"unchanged: {out} "), err2
    assert "Traceback" not in err1 + err2
    assert files_of(out) == new
    assert leftovers(out.parent) == []


def test_loser_of_the_lock_gets_a_clear_error(root, trees):
    manifest, out, old, _ = trees
    first = start_generator(root, "--manifest", manifest, "--out", out, **{PAUSE_ENV: "locked"})
    wait_for_line(first, "paused at locked")
    try:
        second = run_generator(root, "--manifest", manifest, "--out", out, "--lock-timeout", "0.5")
    finally:
        first.kill()
        first.communicate()
    line = assert_clean_error(second)
    assert line == (
        f"error: {out}: another `python -m codegen.generate` (pid {first.pid}) has been writing here for over 0.5s "
        f"(it holds a lock on {out.parent}); wait for it to finish or stop it, then run again "
        "(--lock-timeout SECONDS waits longer)"
    )
    assert files_of(out) == old


def test_two_generators_started_together(root, trees):
    manifest, out, old, new = trees
    for _ in range(3):
        gen.write_atomically({k: v.decode() for k, v in old.items()}, out)
        procs = [start_generator(root, "--manifest", manifest, "--out", out) for _ in range(2)]
        results = [(p.communicate(timeout=120), p.returncode) for p in procs]
        for (stdout, stderr), code in results:
            assert code == 0 and "Traceback" not in stderr, stderr
        assert sorted(stdout.split(" ")[0] for (stdout, _), _ in results) == ["unchanged:", "wrote"]
        assert files_of(out) == new
        assert leftovers(out.parent) == []


# ------------------------------------------------------------ 4. read-only output


def _read_only_runner():
    """A way to run a command with a path read-only, or the reason there is none. As
    root a chmod stops nothing, so the path is mounted read-only in a private mount
    namespace (unshare); other users get a plain chmod."""
    if shutil.which("unshare"):
        probe = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True
        )
        if probe.returncode == 0:
            return _run_on_read_only_mount
    if os.geteuid() != 0:
        return _run_with_chmod
    return "running as root without user namespaces (unshare): nothing can make a directory read-only"


def _run_on_read_only_mount(path: Path, command: list[str]) -> subprocess.CompletedProcess:
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(path), *command],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )


def _run_with_chmod(path: Path, command: list[str]) -> subprocess.CompletedProcess:
    mode = path.stat().st_mode
    path.chmod(mode & ~0o222)
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    finally:
        path.chmod(mode)


@pytest.fixture
def run_read_only():
    runner = _read_only_runner()
    if isinstance(runner, str):
        pytest.skip(runner)
    return runner


@pytest.mark.parametrize("read_only", ["parent", "package"])
def test_read_only_output_is_a_clear_error(root, trees, read_only, run_read_only):
    manifest, out, old, _ = trees
    before = tree_hash(out.parent)
    mounted = out.parent if read_only == "parent" else out
    proc = run_read_only(mounted, generator_command(root, "--manifest", manifest, "--out", out))
    if read_only == "parent":
        line = assert_clean_error(proc, f"error: {out.parent}: directory is read-only; ")
        assert line.endswith(f"make it writable (chmod u+w {out.parent}) or pass --out elsewhere")
    else:
        assert_clean_error(proc, f"error: {out}: directory is read-only, so its files could not be replaced; ")
    assert tree_hash(out.parent) == before


def test_read_only_output_that_is_up_to_date_is_fine(root, trees, run_read_only):
    manifest, out, _, new = trees
    gen.write_atomically({k: v.decode() for k, v in new.items()}, out)
    proc = run_read_only(out.parent, generator_command(root, "--manifest", manifest, "--out", out))
    assert proc.returncode == 0 and proc.stdout.startswith(f"unchanged: {out} "), proc.stderr


@pytest.mark.parametrize("swap", ["exchange", "rename"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_write_failing_halfway_is_a_clear_error(trees, root, monkeypatch, capsys, swap, code):
    """A disk that fills up (or fails) while the new tree is staged."""
    manifest, out, old, _ = trees
    if swap == "rename":
        monkeypatch.setenv(SWAP_ENV, "rename")
    real_fsync, calls = os.fsync, []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(code, os.strerror(code))
        return real_fsync(fd)

    monkeypatch.setattr(gen.os, "fsync", failing_fsync)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 1
    hint = "free some space and run again" if code == errno.ENOSPC else "check the path and run again"
    assert capsys.readouterr().err == (
        f"error: {out}: cannot write the generated package ({os.strerror(code)}); {hint}; {out} was not changed\n"
    )
    assert files_of(out) == old
    assert leftovers(out.parent) == []


def test_failing_exchange_keeps_the_previous_tree(trees, root, monkeypatch, capsys):
    manifest, out, old, _ = trees

    def failing_exchange(a, b):
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(b))

    monkeypatch.setattr(gen, "_exchange", failing_exchange)
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 1
    assert capsys.readouterr().err.startswith(
        f"error: {out}: cannot write the generated package (Input/output error); "
    )
    assert files_of(out) == old
    assert leftovers(out.parent) == []


# ------------------------------------------------------------ 5. a bad manifest writes nothing


def _unknown_op(text: str, root: Path) -> str:
    return text.replace("kthvalue", "kthvalu")


def _duplicate(text: str, root: Path) -> str:
    return text.replace("  - nonzero\n", "  - nonzero\n  - nonzero\n")


def _unsorted(text: str, root: Path) -> str:
    return text.replace("  - kthvalue\n  - median\n", "  - median\n  - kthvalue\n")


def _in_two_sections(text: str, root: Path) -> str:
    return text.replace("  - kthvalue\n", "  - abs\n  - kthvalue\n")


def _bad_signature(text: str, root: Path) -> str:
    (root / "lowerings" / "pointwise.py").write_text(
        LOWERINGS.replace("(self, other, *, alpha=1)", "(self, other, alpha=1)")
    )
    return text


@pytest.mark.parametrize(
    "breaker, message",
    [
        (_unknown_op, "manifest.yaml:8: unknown aten operator 'kthvalu'"),
        (_duplicate, "manifest.yaml:7: 'nonzero' is listed twice in 'supported' (first at line 6); keep one entry"),
        (
            _unsorted,
            "manifest.yaml:9: 'kthvalue' is out of order in 'fallback' (after 'median'); keep each section sorted",
        ),
        (_in_two_sections, "manifest.yaml:8: 'abs' is listed in both 'full_codegen' and 'fallback' (first at line 3)"),
        (_bad_signature, "handwritten function(s) disagree with their schema:"),
    ],
)
def test_bad_manifest_leaves_the_tree_byte_identical(tmp_path, root, trees, monkeypatch, capsys, breaker, message):
    manifest, out, old, _ = trees
    (out / "__pycache__").mkdir()
    (out / "__pycache__" / "ir.cpython-311.pyc").write_bytes(b"\0bytecode")
    before = tree_hash(out.parent)
    manifest.write_text(breaker(NEXT_MANIFEST, root))
    assert run_main(monkeypatch, root, "--manifest", manifest, "--out", out) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and message in captured.err, captured.err
    assert tree_hash(out.parent) == before


def test_bad_real_manifest_leaves_a_copy_of_generated_byte_identical(tmp_path):
    """The real manifest with an unknown op, against a copy of the real generated tree."""
    out = copy_tree(GENERATED, tmp_path / "generated" / "xla_native_functions")
    before = tree_hash(out.parent)
    text = (REPO / "native_functions.yaml").read_text()
    manifest = write_manifest(tmp_path, text.replace("\n  - abs\n", "\n  - abss\n", 1))
    proc = run_generator(None, "--manifest", manifest, "--out", out)
    assert_clean_error(proc, f"error: {manifest}:")
    assert "unknown aten operator 'abss'" in proc.stderr
    assert tree_hash(out.parent) == before
