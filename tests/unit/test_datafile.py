"""The one TOML reader: key paths located to their line, every problem of a file in one error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from validate.datafile import Key, read_toml
from validate.errors import CaseError, MatrixError, ValidateError
from validate.execute.cases import load_manifest
from validate.judge.known_issues import load_known_issues
from validate.model.matrix import load_matrix
from validate.plan.requirements import RequirementTable
from validate.plan.rules import load_rules

if TYPE_CHECKING:
    from collections.abc import Callable

DATA = Path(__file__).resolve().parent.parent / "resources" / "data"

#: Headers, dotted and quoted keys, multi-line arrays and strings (holding text that looks like a
#: header or a key), inline tables, nested arrays of tables, and a date with a space in it.
TRICKY = """\
# [not] a header = "x"
top = 1
dotted.key = "v"
"quoted key" = 'lit'

[table]
multi = \"\"\"
[fake]
fake = 1 \\""\"
\"\"\"
after = [
  1, # a comment ] with a bracket
  [2, 3],
  { inner = "x" },
]

[[arr]]
name = "first"

[[arr]]
name = "second"
[arr.sub]
deep = true
[[arr.items]]
v = 1
[[arr.items]]
v = 2

[cases."2*.ipynb"]
lit = '''it's'''
x = 1979-05-27 07:32:00Z
y = "tail"
"""


@pytest.mark.parametrize(
    ("parts", "line"),
    [
        (("top",), 2),
        (("dotted", "key"), 3),
        (("quoted key",), 4),
        (("table",), 6),
        (("table", "multi"), 7),
        (("table", "fake"), 6),  # only text inside a string: the enclosing table's header
        (("table", "after"), 11),
        (("table", "after", 0), 12),
        (("table", "after", 1, 1), 13),
        (("table", "after", 2, "inner"), 14),
        (("arr",), 17),
        (("arr", 0, "name"), 18),
        (("arr", 0, "missing"), 17),  # a key the entry lacks: the entry's header
        (("arr", 1), 20),
        (("arr", 1, "name"), 21),
        (("arr", 1, "sub", "deep"), 23),
        (("arr", 1, "items", 0), 24),
        (("arr", 1, "items", 1, "v"), 27),
        (("cases", "2*.ipynb"), 29),
        (("cases", "2*.ipynb", "x"), 31),
        (("cases", "2*.ipynb", "y"), 32),
        (("nowhere",), None),
    ],
)
def test_key_paths_are_located_to_their_line(
    tmp_path: Path, parts: tuple[str | int, ...], line: int | None
) -> None:
    path = tmp_path / "tricky.toml"
    path.write_text(TRICKY, encoding="utf-8")
    doc = read_toml(path, what="test")
    assert doc.data["table"]["multi"] == '[fake]\nfake = 1 """\n'  # type: ignore[index]
    assert doc.errors.line_of(Key.of(*parts)) == line


def test_key_text_reads_as_in_the_file() -> None:
    assert str(Key.of("axes", "cudnn", 2)) == "axes.cudnn[2]"
    assert str(Key.of("cases", "2*.ipynb") / "min_sm") == 'cases."2*.ipynb".min_sm'
    assert str(Key.of("rule", 0).named("cuda13-arch") / "when" / "arch") == (
        "rule[0](cuda13-arch).when.arch"
    )
    assert Key.of("rule", 0).named("x").parts == ("rule", 0)


def test_problems_are_collected_and_raised_once_as_the_given_error(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[[case]]\nname = "a"\n\n[[case]]\nname = 3\n', encoding="utf-8")
    errors = read_toml(path, what="case manifest", error=CaseError).errors
    errors.raise_if_any()  # nothing recorded: no error
    errors.add(Key.of("case", 1, "name"), "expected a string")
    errors.add(Key.of("case", 0, "script"), "missing")
    with pytest.raises(CaseError) as info:
        errors.raise_if_any()
    assert str(info.value) == (
        f"{path}:5: case[1].name: expected a string; {path}:1: case[0].script: missing"
    )


THREE_BAD: list[tuple[Callable[[Path], object], str, list[tuple[int, str, str]]]] = [
    (
        load_matrix,
        "three_bad_matrix.toml",
        [
            (9, "axes.cudnn[2]", "duplicate value '9.24.0.43'"),
            (21, "include[0].arch", "unknown arch 'sm91' (known: sm70, "),
            (24, "exclude[0]", "missing 'reason' (every exclusion says why)"),
        ],
    ),
    (
        load_rules,
        "three_bad_rules.toml",
        [
            (5, "rule[0](a).when.frontend", "invalid specifier '=>1.12' (expected PEP 440"),
            (16, "rule[1](b).colour", "unknown key (known: cite, effect, name, reason, "),
            (18, "rule[2](c).cite", "missing or empty (got None): every rule needs reason"),
        ],
    ),
    (
        load_known_issues,
        "three_bad_known_issues.toml",
        [
            (10, "issue[0].symptom.match", "bad regex '(': missing ), unterminated subpattern"),
            (18, "issue[1].fixed_in", "not a version: 'soon'"),
            (21, "issue[2].id", "duplicate id 'KI-1'"),
        ],
    ),
]


@pytest.mark.parametrize(("load", "name", "expected"), THREE_BAD, ids=["matrix", "rules", "ki"])
def test_three_bad_entries_are_one_error_with_lines_and_key_paths(
    load: Callable[[Path], object], name: str, expected: list[tuple[int, str, str]]
) -> None:
    path = DATA / name
    with pytest.raises(MatrixError) as info:
        load(path)
    text = str(info.value)
    assert "\n" not in text
    parts = text.split("; ")
    assert len(parts) == len(expected), text
    for part, (line, key, problem) in zip(parts, expected, strict=True):
        assert part.startswith(f"{path}:{line}: {key}: {problem}"), part
    assert info.value.return_code == 2


def _manifest(path: Path) -> object:
    (path.parent / "case.py").write_text("print('ok')\n", encoding="utf-8")
    return load_manifest(path.parent)


#: Each data file's loader, the name its messages give the file, the error it raises.
LOADERS: list[tuple[Callable[[Path], object], str, type[ValidateError]]] = [
    (load_matrix, "matrix", MatrixError),
    (load_rules, "rules", MatrixError),
    (load_known_issues, "known-issues", MatrixError),
    (RequirementTable.from_toml, "case requirements", MatrixError),
    (_manifest, "case manifest", CaseError),
]


@pytest.mark.parametrize(("load", "what", "error"), LOADERS, ids=[w for _, w, _ in LOADERS])
@pytest.mark.parametrize(
    ("text", "line", "where"),
    [
        ('# comment\n[t]\nkey = "unterminated\n', 3, "at line 3, column 20"),
        ("a = 1\n\n[x\n", 3, "at line 3, column 3"),
        ("a = [1,\n", 1, "at end of document"),
    ],
)
def test_a_syntax_error_names_file_and_line(
    tmp_path: Path,
    load: Callable[[Path], object],
    what: str,
    error: type[ValidateError],
    text: str,
    line: int,
    where: str,
) -> None:
    path = tmp_path / "cases.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(error) as info:
        load(path)
    assert re.fullmatch(
        rf"{re.escape(f'{path}:{line}: malformed TOML in {what} file: ')}.*\({where}\)",
        str(info.value),
    ), str(info.value)


@pytest.mark.parametrize(("load", "what", "error"), LOADERS, ids=[w for _, w, _ in LOADERS])
def test_an_unreadable_file_names_the_file(
    tmp_path: Path, load: Callable[[Path], object], what: str, error: type[ValidateError]
) -> None:
    path = tmp_path / "cases.toml"
    path.write_bytes(b'a = "\xff"\n')  # not UTF-8
    with pytest.raises(error, match=rf"^{re.escape(f'{path}: cannot read {what} file')}"):
        load(path)
