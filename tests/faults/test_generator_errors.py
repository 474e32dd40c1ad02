"""Bad input to `python -m codegen.generate` gets `error: FILE:LINE: what; how to fix`
and a non-zero exit, never a traceback: an unreadable or non-UTF-8 manifest, YAML
syntax errors (placed at the unclosed bracket or quote, not where PyYAML gave up), and
Python files under lowerings/, shape_fns/ or runtime/ that do not parse."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from generator_helpers import GOOD_MANIFEST, REPO, assert_clean_error, gen, make_root, run_generator, write_manifest
from codegen_harness import IMPLS, LOWERINGS, SHAPE_FNS


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "root")


def error_of(monkeypatch, capsys, root: Path, *argv) -> str:
    """main()'s stderr for a run that must fail, with the output directory untouched."""
    monkeypatch.setattr(gen, "render", functools.partial(gen.render, root=root))
    out = root.parent / "out" / "pkg"
    assert gen.main([str(a) for a in argv] + ["--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert not out.exists()
    return captured.err


# ------------------------------------------------------------ the manifest file


def test_missing_manifest(tmp_path):
    proc = run_generator(None, "--manifest", tmp_path / "nope.yaml", "--out", tmp_path / "pkg")
    assert assert_clean_error(proc) == f"error: {tmp_path}/nope.yaml: no such manifest file; check the path"


def test_directory_as_manifest(tmp_path):
    proc = run_generator(None, "--manifest", tmp_path, "--out", tmp_path / "pkg")
    assert assert_clean_error(proc) == (
        f"error: {tmp_path}: is a directory, not a manifest file; give the path of the file itself"
    )


def test_non_utf8_manifest(tmp_path):
    manifest = tmp_path / "manifest.yaml"
    manifest.write_bytes(GOOD_MANIFEST.replace("  - nonzero\n", "  - nonz\xe9ro\n").encode("latin-1"))
    proc = run_generator(None, "--manifest", manifest, "--out", tmp_path / "pkg")
    assert assert_clean_error(proc) == (
        f"error: {manifest}:6: byte 0xe9 at column 9 is not UTF-8; save the file as UTF-8 (it must be text)"
    )


def test_control_character_in_manifest(tmp_path, root, monkeypatch, capsys):
    manifest = write_manifest(tmp_path, GOOD_MANIFEST.replace("  - abs\n", "  - a\x07bs\n"))
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        f"error: {manifest}:3: YAML syntax error: control character U+0007 is not allowed; remove it\n"
    )


# ------------------------------------------------------------ YAML syntax errors where they are


@pytest.mark.parametrize(
    "opener, closer, noticed, problem",
    [
        ("[", "]", 5, "expected ',' or ']', but got ':'"),
        ("{", "}", 5, "expected ',' or '}', but got ':'"),
        ('"', '"', 9, "found unexpected end of stream"),
        ("'", "'", 9, "found unexpected end of stream"),
    ],
)
def test_unclosed_bracket_or_quote_is_reported_where_it_opens(
    tmp_path, root, monkeypatch, capsys, opener, closer, noticed, problem
):
    manifest = write_manifest(tmp_path, GOOD_MANIFEST.replace("  - add.Tensor\n", f"  - {opener}add.Tensor\n"))
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        f"error: {manifest}:4: YAML syntax error: the {opener} opened on this line is not closed before line {noticed} "
        f"(PyYAML: {problem}); add the closing {closer} on line 4 or remove the {opener}\n"
    )


def test_unclosed_bracket_in_the_real_manifest(tmp_path):
    """The reported case: an unclosed `[` on line 81 came out as line 579."""
    lines = (REPO / "native_functions.yaml").read_text().splitlines(keepends=True)
    assert lines[80].startswith("  - ")
    lines[80] = lines[80].replace("  - ", "  - [", 1)
    manifest = write_manifest(tmp_path, "".join(lines))
    proc = run_generator(None, "--manifest", manifest, "--out", tmp_path / "pkg")
    line = assert_clean_error(
        proc, f"error: {manifest}:81: YAML syntax error: the [ opened on this line is not closed before line "
    )
    assert line.endswith("add the closing ] on line 81 or remove the [")


def test_quote_running_on_to_a_later_quote(tmp_path, root, monkeypatch, capsys):
    """An open quote that a later apostrophe (in a comment) closes: PyYAML stops there."""
    text = GOOD_MANIFEST.replace("  - add.Tensor\n", "  - 'add.Tensor\n").replace(
        "supported:\n", "# don't\nsupported:\n"
    )
    manifest = write_manifest(tmp_path, text)
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        f"error: {manifest}:4: YAML syntax error: the ' quote opened on this line runs on to line 5 "
        "(PyYAML stopped at line 5: expected <block end>, but found '<scalar>'); close the quote on line 4 or remove "
        "it\n"
    )


def test_error_on_the_line_of_its_bracket_is_reported_as_is(tmp_path, root, monkeypatch, capsys):
    manifest = write_manifest(
        tmp_path, GOOD_MANIFEST.replace("fallback:\n  - kthvalue\n", "fallback: [kthvalue, @median]\n")
    )
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        f"error: {manifest}:7: YAML syntax error: found character '@' that cannot start any token\n"
    )


# ------------------------------------------------------------ the handwritten Python files


FOLDERS = [
    ("lowerings", "pointwise.py", LOWERINGS),
    ("shape_fns", "pointwise.py", SHAPE_FNS),
    ("runtime", "ops.py", IMPLS),
]


@pytest.mark.parametrize("folder, name, text", FOLDERS, ids=[f[0] for f in FOLDERS])
def test_python_syntax_error(tmp_path, root, monkeypatch, capsys, folder, name, text):
    (root / folder / name).write_text(text + "\n\ndef broken(:\n    pass\n")
    line = text.count("\n") + 3
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        f"error: {folder}/{name}:{line}: Python syntax error at column 12: invalid syntax; fix it "
        "(the generator reads every .py file here for the functions the manifest names)\n"
        "    def broken(:\n"
    )


@pytest.mark.parametrize("folder, name, text", FOLDERS, ids=[f[0] for f in FOLDERS])
def test_non_utf8_python_file(tmp_path, root, monkeypatch, capsys, folder, name, text):
    """This one did not even name the file."""
    (root / folder / name).write_bytes((text + "# caf\xe9\n").encode("latin-1"))
    line = text.count("\n") + 1
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        f"error: {folder}/{name}:{line}: byte 0xe9 at column 6 is not UTF-8; save the file as UTF-8 (it must be text)\n"
    )


def test_nul_byte_in_python_file(tmp_path, root, monkeypatch, capsys):
    (root / "runtime" / "ops.py").write_bytes(IMPLS.encode() + b"x = 1\0\n")
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    assert error_of(monkeypatch, capsys, root, "--manifest", manifest) == (
        "error: runtime/ops.py:7: a NUL byte at column 6; the file must be Python source text "
        "(it looks binary or damaged): remove the byte or restore the file\n"
    )


def test_python_file_that_python_accepts_is_accepted(tmp_path, root):
    """A BOM and a coding declaration are Python's own rules: not errors."""
    (root / "lowerings" / "pointwise.py").write_bytes(b"\xef\xbb\xbf" + LOWERINGS.encode())
    (root / "runtime" / "ops.py").write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + IMPLS).encode("latin-1"))
    result = gen.render(write_manifest(tmp_path, GOOD_MANIFEST), root=root)
    assert result.warnings == []


def test_syntax_error_from_the_command_line(tmp_path):
    """The whole command, as a user runs it: one line, exit 1, no traceback."""
    root = make_root(tmp_path / "root", lowerings=LOWERINGS.replace("return self\n", "return self)\n", 1))
    manifest = write_manifest(tmp_path, GOOD_MANIFEST)
    proc = run_generator(root, "--manifest", manifest, "--out", tmp_path / "pkg")
    assert_clean_error(proc, "error: lowerings/pointwise.py:5: Python syntax error at column 16: unmatched ')'; fix it")
    assert not (tmp_path / "pkg").exists()
