"""The compatibility grid of the HTML page, fitted to a 1,400 px window: as pivoted, transposed, or
split into column groups when wide; each cell links its results into the drill-down."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from validate.report.html_parts import COLOURS, esc, marks, rank
from validate.report.model import AXIS_TITLES, axis_label, result_key
from validate.report.text import LEGEND

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.report import Report
    from validate.report.model import StoredResult
    from validate.report.table import CompatTable

__all__ = ["fitted_grid", "grid_notes"]


#: What the grid may take of a 1,400 px window (body margins, a scroll bar), and a cell's cost.
_GRID_BUDGET_PX: Final = 1300


_CHAR_PX: Final = 8.5  # a generous average for 14 px system-ui with symbols


_PAD_PX: Final = 18  # padding and border of a cell


@dataclass(frozen=True, kw_only=True)
class _Grid:
    """The table laid out for the page: header cells over the row headers, a header per data
    column, and per row its header values and the (row, column) index of each data cell."""

    corner: tuple[str, ...]
    heads: tuple[str, ...]
    rows: tuple[tuple[tuple[str, ...], tuple[tuple[int, int], ...]], ...]

    def width(self, table: CompatTable, columns: Sequence[int] | None = None) -> float:
        """Estimated width in px of the row headers plus the given data columns (all if None)."""
        picked = range(len(self.heads)) if columns is None else columns
        total = 0.0
        for k in range(len(self.corner)):
            longest = max([len(self.corner[k]), *(len(head[k]) for head, _ in self.rows)])
            total += longest * _CHAR_PX + _PAD_PX
        for j in picked:
            texts = [self.heads[j], *(_text(table, at[j]) for _, at in self.rows)]
            total += max(map(len, texts)) * _CHAR_PX + _PAD_PX
        return total


def _text(table: CompatTable, at: tuple[int, int]) -> str:
    return table.cell(table.row_keys[at[0]], table.col_keys[at[1]]).text


def _layouts(table: CompatTable) -> tuple[_Grid, _Grid]:
    """The table as pivoted, and transposed (its columns as rows)."""
    pivot = table.pivot
    rows, cols = range(len(table.row_keys)), range(len(table.col_keys))
    as_is = _Grid(
        corner=tuple(AXIS_TITLES[a] for a in pivot.rows),
        heads=tuple(table.headers()[len(pivot.rows) :]),
        rows=tuple((table.row_keys[r], tuple((r, c) for c in cols)) for r in rows),
    )
    turned = _Grid(
        corner=tuple(AXIS_TITLES[a] for a in pivot.cols),
        heads=tuple(
            " / ".join(axis_label(a, v) for a, v in zip(pivot.rows, key, strict=True))
            for key in table.row_keys
        ),
        rows=tuple(
            (
                tuple(axis_label(a, v) for a, v in zip(pivot.cols, table.col_keys[c], strict=True)),
                tuple((r, c) for r in rows),
            )
            for c in cols
        ),
    )
    return as_is, turned


def _fit(table: CompatTable) -> tuple[_Grid, list[list[int]]]:
    """The layout and its data columns split into groups that each fit the budget: the table as
    pivoted where it fits, else transposed where that fits, else the narrower of the two split
    into several tables (each with the row headers again)."""
    as_is, turned = _layouts(table)
    for grid in (as_is, turned):
        if grid.width(table) <= _GRID_BUDGET_PX:
            return grid, [list(range(len(grid.heads)))]
    grid = min((as_is, turned), key=lambda g: g.width(table))
    groups: list[list[int]] = [[]]
    for j in range(len(grid.heads)):
        if groups[-1] and grid.width(table, [*groups[-1], j]) > _GRID_BUDGET_PX:
            groups.append([])
        groups[-1].append(j)
    return grid, groups


def fitted_grid(
    report: Report, items: Sequence[StoredResult]
) -> tuple[str, dict[str, list[int]], dict[str, int]]:
    """The compatibility grid (cells clickable for their results); per data cell, the indices
    of its results in `items` (those the page carries, worst first) and the count of those it
    leaves out."""
    table = report.table
    index = {result_key(item.result): i for i, item in enumerate(items)}
    grid, groups = _fit(table)
    cells: dict[str, list[int]] = {}
    omitted: dict[str, int] = {}
    tables = []
    for group in groups:
        head = "".join(
            f"<th>{esc(h)}</th>" for h in (*grid.corner, *(grid.heads[j] for j in group))
        )
        rows = []
        for values, at in grid.rows:
            tds = "".join(f"<th>{esc(v)}</th>" for v in values)
            for j in group:
                r, c = at[j]
                row, col = table.row_keys[r], table.col_keys[c]
                cell = table.cell(row, col)
                if cell.status == "empty":
                    tds += f'<td class="st-empty">{esc(cell.text)}</td>'
                    continue
                key = f"{r}:{c}"
                carried = [index[k] for k in cell.keys if k in index]
                cells[key] = sorted(carried, key=lambda i: rank(items[i]))
                if len(carried) < len(cell.keys):
                    omitted[key] = len(cell.keys) - len(carried)
                label = f"{' / '.join(row)} · {' / '.join(col)}"
                tds += (
                    f'<td class="cell st-{cell.status}" tabindex="0" data-cell="{key}" '
                    f'data-label="{esc(label)}" style="background:{COLOURS[cell.status][0]}">'
                    f"{marks(cell.text)}</td>"
                )
            rows.append(f"<tr>{tds}</tr>")
        tables.append(
            f'<table class="matrix grid"><thead><tr>{head}</tr></thead><tbody>'
            f"{chr(10).join(rows)}</tbody></table>"
        )
    return f'<div id="grid">{"".join(tables)}</div>', cells, omitted


#: `[s1] ⏱ slower: ...`: the mark an extra note (another section's, e.g. report/speed.py) defines.
_NOTE_MARK: Final = re.compile(r"\[(\w+)\] ")


def grid_notes(table: CompatTable) -> str:
    """Colour legend, symbol legend and the footnotes, whole (the md table cuts them), each
    with the id (`note-1`, `note-s1`) that a mark in the grid refers to."""
    legend = "".join(
        f'<span class="sw" style="background:{colour}"></span>{esc(text)}'
        for colour, text in COLOURS.values()
    )
    plural = {True: "results", False: "result"}
    notes = "".join(
        f'<li id="note-{n.index}">[{n.index}] {esc(n.kind)}: {esc(n.full or n.reason)} '
        f"({n.count} {plural[n.count != 1]})</li>"
        for n in table.footnotes
    )
    for extra in table.extra_notes:  # the speed section's [sN], defined here as in the md
        found = _NOTE_MARK.match(extra)
        ident = f' id="note-{esc(found[1])}"' if found else ""
        notes += f"<li{ident}>{marks(extra)}</li>"
    return (
        f'<p class="legend">{legend}</p><p>{esc(LEGEND)}</p><ul class="notes">{notes}</ul>'
        '<div id="detail">Click a cell for its results.</div>'
    )
