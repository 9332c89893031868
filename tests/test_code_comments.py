"""Comments and docstrings of the package say what code is for and why. A module docstring
says what the module is for in a few lines; detail a user needs lives in docs/, detail a
maintainer needs sits next to the code it explains. Measurements and their dates live in
benchmarks/RESULTS.md, not in the code."""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "recsys_dist"

#: The longest a module docstring may be, in lines.
MAX_MODULE_DOCSTRING_LINES = 20

#: A year from 2020 to 2039.
YEAR = re.compile(r"\b20[23]\d\b")
#: Where a year is legitimate: inside an inline code literal (``2026-01-07`` as an
#: example of a date, a partition name or a config value) and in a citation of a paper
#: ("Wang et al., 2021").
CODE_LITERAL = re.compile(r"``.*?``|`[^`]*`")
CITATION = re.compile(r"et al\.,? 20\d\d")


def modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_build" not in p.parts)


def relative(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def module_docstring_lines(source: str) -> int:
    """Lines of a module's docstring as written (0 without one)."""
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    return len(docstring.splitlines()) if docstring else 0


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(offset, line)`` of each line of a docstring that is prose: the lines of a literal
    block (the indented lines after a line ending in ``::``, such as an example config)
    are examples, not prose."""
    lines, literal_indent = [], None
    for offset, line in enumerate(text.splitlines()):
        indent = len(line) - len(line.lstrip())
        if literal_indent is not None and (not line.strip() or indent > literal_indent):
            continue
        literal_indent = indent if line.rstrip().endswith("::") else None
        lines.append((offset, line))
    return lines


def dated_lines(source: str) -> list[tuple[int, str]]:
    """``(line number, text)`` of every comment or docstring line naming a year as prose."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        docstring = ast.get_docstring(node, clean=False)
        if docstring is None:
            continue
        first = node.body[0].lineno
        for offset, line in prose_lines(docstring):
            if YEAR.search(CITATION.sub("", CODE_LITERAL.sub("", line))):
                found.append((first + offset, line.strip()))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            if YEAR.search(CITATION.sub("", CODE_LITERAL.sub("", token.string))):
                found.append((token.start[0], token.string.strip()))
    return sorted(found)


def test_module_docstrings_are_short():
    long = {
        relative(path): lines
        for path in modules()
        if (lines := module_docstring_lines(path.read_text())) > MAX_MODULE_DOCSTRING_LINES
    }
    assert not long, (
        f"module docstrings longer than {MAX_MODULE_DOCSTRING_LINES} lines (module: lines): "
        f"{long}; say what the module is for in a few lines, move what a user needs to "
        "docs/ and what a maintainer needs next to the code it explains"
    )


def test_no_comment_or_docstring_names_a_year():
    dated = {
        f"{relative(path)}:{number}": text
        for path in modules()
        for number, text in dated_lines(path.read_text())
    }
    assert not dated, (
        f"comments or docstrings naming a year: {dated}; dates of work and dated "
        "measurements belong in benchmarks/RESULTS.md (an example date goes in ``...``)"
    )


def test_the_checks_catch_what_they_are_for():
    long = '"""Title.\n' + "line\n" * MAX_MODULE_DOCSTRING_LINES + '"""\n'
    assert module_docstring_lines(long) == MAX_MODULE_DOCSTRING_LINES + 1
    assert module_docstring_lines('"""One line."""\n') == 1
    assert module_docstring_lines("x = 1\n") == 0
    source = (
        '"""Measured on 2026-11-27: fast.\n\n'
        "Example::\n\n"
        "    train: {dates: 2026-01-01..2026-01-06}\n\n"
        'Reads ``dt=2026-01-07`` (Wang et al., 2021)."""\n'
        "# timed in 2031\n"
        "x = 1  # see `2026-01-02`\n"
    )
    assert dated_lines(source) == [
        (1, "Measured on 2026-11-27: fast."),
        (8, "# timed in 2031"),
    ]
