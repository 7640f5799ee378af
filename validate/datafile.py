"""One reader for every TOML data file: parse once, then report all problems at once, each located.

A loader reads a file with `read_toml`, checks the data, records each problem on `Doc.errors` under
the key path it concerns (`Key`), and calls `raise_if_any()`: one error whose message holds every
problem as ``file:line: key.path: problem``, joined by "; " so that the CLI prints one line.

tomllib gives no positions for values, so a small scanner walks the text tomllib has accepted and
notes where each key path starts: table headers, ``key =`` lines (dotted and quoted keys too), array
items and inline-table keys. A path that the file does not hold (a missing key) is placed at its
nearest enclosing entry that it does hold, e.g. the ``[[rule]]`` header.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from validate._compat import tomllib
from validate.errors import MatrixError, ValidateError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["Doc", "Key", "TomlErrors", "read_toml"]

#: A key path as parts: table and key names, and indices into arrays (of tables).
Parts = tuple[str | int, ...]

_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR: Final = re.compile(r"[^,\]}\r\n#]*")  # numbers, booleans, dates (which may hold a space)
_AT_LINE: Final = re.compile(r"\(at line (\d+), column \d+\)$")


@dataclass(frozen=True, kw_only=True)
class Key:
    """A key path into a document, shown as in messages (``rule[0](name).select.cuda``).

    `key / "name"` and `key / 3` go one level down; `named` adds a label for the reader.
    """

    parts: Parts = ()
    text: str = ""

    @classmethod
    def of(cls, *parts: str | int) -> Key:
        key = cls()
        for part in parts:
            key /= part
        return key

    def __truediv__(self, part: str | int) -> Key:
        if isinstance(part, int):
            return Key(parts=(*self.parts, part), text=f"{self.text}[{part}]")
        name = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
        return Key(parts=(*self.parts, part), text=f"{self.text}.{name}" if self.text else name)

    def named(self, label: str) -> Key:
        """The same path, shown with a label after it, e.g. a rule's name: ``rule[3](cuda13-arch)``."""
        return Key(parts=self.parts, text=f"{self.text}({label})")

    def __str__(self) -> str:
        return self.text


class TomlErrors:
    """Every problem found in one file, each located by its key path; raised together."""

    def __init__(
        self, path: Path, lines: Mapping[Parts, int], error: type[ValidateError] = MatrixError
    ) -> None:
        self.path = path
        self.error = error
        self.messages: list[str] = []
        self._lines = lines

    def line_of(self, key: Key) -> int | None:
        """The line where `key` starts, else where its nearest enclosing entry starts."""
        parts = key.parts
        return next(
            (self._lines[parts[:n]] for n in range(len(parts), 0, -1) if parts[:n] in self._lines),
            None,
        )

    def add(self, key: Key, problem: str) -> None:
        line = self.line_of(key)
        where = f"{self.path}:{line}" if line else str(self.path)
        self.messages.append(f"{where}: {key}: {problem}")

    def raise_if_any(self) -> None:
        if self.messages:
            raise self.error("; ".join(self.messages))


@dataclass(frozen=True, kw_only=True)
class Doc:
    """A parsed data file: its table and the collector for the problems found in it."""

    path: Path
    data: dict[str, object]
    errors: TomlErrors


#: Input scale: a data file larger than this is refused before it is parsed. The shipped files
#: are a few KiB; 2 MiB holds about 100 000 axis values, ten times the per-axis limit.
MAX_DATA_BYTES: Final = 2 * 2**20


def read_toml(path: Path, *, what: str, error: type[ValidateError] = MatrixError) -> Doc:
    """Read and parse a TOML file; an unreadable or malformed one raises `error` at once.

    `what` names the file's kind in messages ("matrix", "rules", "known-issues", ...).
    """
    try:
        size = path.stat().st_size
        if size > MAX_DATA_BYTES:  # checked before parsing: a huge file would take minutes
            msg = (
                f"{path}: {what} file is {size / 2**20:.1f} MiB, more than the limit of "
                f"{MAX_DATA_BYTES // 2**20} MiB for a data file; split it or narrow it"
            )
            raise error(msg)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{path}: cannot read {what} file ({type(exc).__name__}: {exc})"
        raise error(msg) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = f"{path}:{_syntax_line(exc, text)}"
        msg = f"{where}: malformed TOML in {what} file: {exc}"
        raise error(msg) from exc
    return Doc(path=path, data=data, errors=TomlErrors(path, _locate(text), error))


def _syntax_line(exc: tomllib.TOMLDecodeError, text: str) -> int:
    """The line tomllib names in its message ("... (at line 3, column 1)"); the last one when it
    says "at end of document"."""
    found = _AT_LINE.search(str(exc))
    return int(found[1]) if found else max(len(text.splitlines()), 1)


def _locate(text: str) -> dict[Parts, int]:
    """1-based line of every key path in TOML `text` (text that tomllib has accepted)."""
    scanner = _Scanner(text)
    # Not expected on text tomllib accepted; should the scanner trip anyway, the paths it found
    # keep their lines and the rest fall back to their enclosing entry (or to no line).
    with contextlib.suppress(IndexError, ValueError):
        scanner.document()
    newlines = [n for n, char in enumerate(text) if char == "\n"]
    return {parts: bisect.bisect_left(newlines, pos) + 1 for parts, pos in scanner.found.items()}


class _Scanner:
    """Walks TOML text and notes the offset where each key path first appears."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: dict[Parts, int] = {}
        self._tables: dict[Parts, int] = {}  # [[array]] path -> how many of its headers so far

    def document(self) -> None:
        table: Parts = ()
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            start = self.pos
            if self.text.startswith("[[", start):
                self.pos += 2
                parts = self._key()
                array = (*self._resolve(parts[:-1]), parts[-1])
                index = self._tables.get(array, 0)
                self._tables[array] = index + 1
                table = (*array, index)
                self._expect("]]")
            elif self.text[start] == "[":
                self.pos += 1
                table = self._resolve(self._key())
                self._expect("]")
            else:
                self._pair(table)
                continue
            self._note(table, start)

    def _resolve(self, parts: Parts) -> Parts:
        """A header's path with the index of the latest [[array]] entry it refers into."""
        out: Parts = ()
        for part in parts:
            out = (*out, part)
            if out in self._tables:
                out = (*out, self._tables[out] - 1)
        return out

    def _note(self, parts: Parts, pos: int) -> None:
        for n in range(1, len(parts) + 1):
            self.found.setdefault(parts[:n], pos)

    def _pair(self, table: Parts) -> None:
        """``key = value`` in `table` (also inside an inline table)."""
        start = self.pos
        path = (*table, *self._key())
        self._expect("=")
        self._skip()
        self._note(path, start)
        self._value(path)

    def _key(self) -> Parts:
        parts: list[str | int] = []
        while True:
            self._skip()
            if self.text[self.pos] in "\"'":
                start = self.pos
                self._string()
                parts.append(str(tomllib.loads(f"k = {self.text[start : self.pos]}")["k"]))
            else:
                match = _BARE_KEY.match(self.text, self.pos)
                if match is None:
                    msg = f"no key at offset {self.pos}"
                    raise ValueError(msg)
                parts.append(match.group())
                self.pos = match.end()
            self._skip()
            if not self.text.startswith(".", self.pos):
                return tuple(parts)
            self.pos += 1

    def _value(self, path: Parts) -> None:
        char = self.text[self.pos]
        if char == "[":
            self._items(path, "]")
        elif char == "{":
            self._items(path, "}")
        elif char in "\"'":
            self._string()
        else:
            match = _SCALAR.match(self.text, self.pos)
            assert match is not None  # the pattern matches the empty string
            self.pos = match.end()

    def _items(self, path: Parts, close: str) -> None:
        """An array (items are numbered) or an inline table (items are pairs) up to `close`."""
        self.pos += 1
        index = 0
        while True:
            self._skip(newlines=True)
            if self.text[self.pos] == close:
                self.pos += 1
                return
            if close == "]":
                self._note((*path, index), self.pos)
                self._value((*path, index))
            else:
                self._pair(path)
            self._skip(newlines=True)
            if self.text[self.pos] == ",":
                self.pos += 1
                index += 1
            elif self.text[self.pos] != close:
                msg = f"unexpected {self.text[self.pos]!r} at offset {self.pos}"
                raise ValueError(msg)

    def _string(self) -> None:
        text = self.text
        delim = next(d for d in ('"""', "'''", '"', "'") if text.startswith(d, self.pos))
        self.pos += len(delim)
        while True:
            if delim[0] == '"' and text[self.pos] == "\\":
                self.pos += 2
            elif text.startswith(delim, self.pos):
                self.pos += len(delim)
                if len(delim) == 3:  # up to two quotes may end the content: """a""""
                    for _ in range(2):
                        if self.pos < len(text) and text[self.pos] == delim[0]:
                            self.pos += 1
                return
            else:
                self.pos += 1

    def _skip(self, *, newlines: bool = False) -> None:
        """Spaces, tabs and comments (and line ends where `newlines`)."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t" or (newlines and char in "\r\n"):
                self.pos += 1
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def _expect(self, token: str) -> None:
        self._skip()
        if not self.text.startswith(token, self.pos):
            msg = f"expected {token!r} at offset {self.pos}"
            raise ValueError(msg)
        self.pos += len(token)
