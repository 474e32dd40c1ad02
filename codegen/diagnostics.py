"""Reading the generator's inputs with errors that name the file and line.

Every input problem becomes a `SourceError` whose message is `FILE:LINE: what; how to
fix` (`FILE:` alone when the file cannot be opened at all), so `python -m
codegen.generate` prints one line instead of a traceback. Kept free of imports from the
rest of `codegen` so that `manifest.py` and `sources.py` can both use it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml


class SourceError(Exception):
    """An input file of the generator (the manifest or a handwritten .py file) cannot be
    read or parsed. Its message starts with `file:line:` (`file:` when unreadable)."""


def _line_col(data: bytes, offset: int) -> tuple[int, int]:
    line_start = data.rfind(b"\n", 0, offset) + 1
    return data.count(b"\n", 0, offset) + 1, offset - line_start + 1


def read_bytes(path: str | Path, what: str, shown_as: str | None = None) -> bytes:
    """The bytes of `path`, or a SourceError saying why they cannot be read."""
    shown = shown_as or path
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SourceError(f"{shown}: no such {what}; check the path") from None
    except IsADirectoryError:
        raise SourceError(f"{shown}: is a directory, not a {what}; give the path of the file itself") from None
    except PermissionError:
        raise SourceError(f"{shown}: permission denied reading the {what}; make it readable (chmod u+r)") from None
    except OSError as e:
        raise SourceError(f"{shown}: cannot read the {what}: {e.strerror or e}; check the file") from None


def not_utf8(path: str | Path, data: bytes, error: UnicodeDecodeError) -> SourceError:
    line, col = _line_col(data, error.start)
    return SourceError(
        f"{path}:{line}: byte 0x{data[error.start]:02x} at column {col} is not UTF-8; "
        "save the file as UTF-8 (it must be text)"
    )


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of `path` (the manifest), or a SourceError naming the place."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_utf8(path, data, e) from None


_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _check_encoding(shown_as: str, data: bytes) -> None:
    """Python's import rejects a file that is not in its declared encoding (UTF-8 unless a
    `# -*- coding: -*-` line in the first two says otherwise), comments included, though
    compile() lets bytes in comments through: check as the import does."""
    if data.isascii():  # most files, and valid in every encoding Python accepts here
        return
    declared = "utf-8"
    for line in data.split(b"\n", 2)[:2]:
        m = _CODING.match(line)
        if m:
            declared = m.group(1).decode("ascii", "replace")
            break
    try:
        data.decode(declared)
    except UnicodeDecodeError as e:
        if declared.lower().replace("_", "-") in ("utf-8", "utf8"):
            raise not_utf8(shown_as, data, e) from None
        line, col = _line_col(data, e.start)
        raise SourceError(
            f"{shown_as}:{line}: byte 0x{data[e.start]:02x} at column {col} is not {declared}, the encoding "
            "the file declares; fix the byte or the declaration"
        ) from None
    except LookupError:
        raise SourceError(
            f"{shown_as}:1: unknown encoding '{declared}' in the coding declaration; declare utf-8 or remove it"
        ) from None


def parse_python(file: Path, shown_as: str) -> ast.Module:
    """The syntax tree of a handwritten module, or a SourceError that names `shown_as`
    (the file's repo-relative path) and the line. Bytes are handed to the parser so
    that a BOM or a coding declaration is honoured as Python honours it."""
    data = read_bytes(file, "Python file", shown_as)
    if b"\0" in data:
        line, col = _line_col(data, data.index(b"\0"))
        raise SourceError(
            f"{shown_as}:{line}: a NUL byte at column {col}; the file must be Python source text "
            "(it looks binary or damaged): remove the byte or restore the file"
        )
    _check_encoding(shown_as, data)
    try:
        # The real path, not shown_as: for a missing source line Python reads the file
        # the name points at, which relative to the working directory may be another one.
        return ast.parse(data, filename=str(file))
    except SyntaxError as e:
        line = e.lineno or 1
        text = (e.text or "").strip()
        context = f"\n    {text}" if text else ""
        raise SourceError(
            f"{shown_as}:{line}: Python syntax error{f' at column {e.offset}' if e.offset else ''}: {e.msg}; "
            "fix it (the generator reads every .py file here for the functions the manifest names)" + context
        ) from None


# ------------------------------------------------------------------- YAML syntax errors

_CLOSERS = {"[": "]", "{": "}"}


def _multiline_quote(text: str, before: int) -> tuple[int, int, str] | None:
    """(start line, end line, quote) of the first quoted scalar that spans lines and
    starts before offset `before`: an entry's quote left open runs on to the next quote
    character, often in a comment lines below, where PyYAML then stops."""
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= before:
                return None
            if isinstance(token, yaml.ScalarToken) and token.style in ("'", '"'):
                if token.end_mark.line != token.start_mark.line:
                    return token.start_mark.line + 1, token.end_mark.line + 1, token.style
    except yaml.YAMLError:
        return None
    return None


def yaml_error(path: str | Path, text: str, error: yaml.YAMLError) -> SourceError:
    """A YAML syntax error placed where the mistake is. PyYAML notices an unclosed `[`,
    `{` or quote where the document stops making sense, often hundreds of lines later;
    the opening line is what needs fixing, so it comes first and the line PyYAML stopped
    at is given as context."""
    if isinstance(error, yaml.reader.ReaderError):  # a control character: no mark, an offset
        line = text.count("\n", 0, error.position) + 1
        char = error.character if isinstance(error.character, int) else ord(error.character)
        return SourceError(
            f"{path}:{line}: YAML syntax error: control character U+{char:04X} is not allowed; remove it"
        )
    if not isinstance(error, yaml.MarkedYAMLError):
        return SourceError(f"{path}:1: YAML error: {error}")
    mark = error.problem_mark or error.context_mark
    noticed = mark.line + 1 if mark is not None else 1
    problem = error.problem or str(error)
    ctx = error.context_mark
    opened: tuple[int, str] | None = None
    if ctx is not None and error.context in ("while parsing a flow sequence", "while parsing a flow mapping"):
        opened = ctx.line + 1, text[ctx.index] if ctx.index < len(text) else "["
    elif ctx is not None and error.context == "while scanning a quoted scalar":
        opened = ctx.line + 1, text[ctx.index] if ctx.index < len(text) else '"'
    if opened is not None and opened[0] != noticed:
        line, char = opened
        closer = _CLOSERS.get(char, char)
        return SourceError(
            f"{path}:{line}: YAML syntax error: the {char} opened on this line is not closed before line {noticed} "
            f"(PyYAML: {problem}); add the closing {closer} on line {line} or remove the {char}"
        )
    quoted = _multiline_quote(text, mark.index if mark is not None else len(text))
    if quoted is not None and quoted[0] != noticed:
        start, end, quote = quoted
        return SourceError(
            f"{path}:{start}: YAML syntax error: the {quote} quote opened on this line runs on to line {end} "
            f"(PyYAML stopped at line {noticed}: {problem}); close the quote on line {start} or remove it"
        )
    return SourceError(f"{path}:{noticed}: YAML syntax error: {problem}")
