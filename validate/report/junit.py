"""JUnit XML that GitLab and Jenkins read: one testsuite per cell, one testcase per cell x case.

A pytest node id is named as pytest's junitxml names it, under the cell's class: classname =
the cell's (below) + the module path with dots (+ any test class), name = the test with its
parameters: `cudnn-9_24_0_43....sm90.test.python.test_mhas` / `test_sdpa[fp16-64]`.

Each testsuite carries <properties>: the known-issue state of its backend x frontend x arch, one
property per known issue, e.g. `ki.KI-1.9_24_0_43.fe-1_27_0.sm90` = `affected` (report/ki_table.py).

A flaky testcase (not a pass, then a pass on a re-run) carries the properties `flaky` = `true` and
`attempts` = `fail/pass`. With `--flaky block` it keeps its <failure> (or <error>); with `--flaky
warn` it is a passed testcase holding a <flakyFailure> (or <flakyError>), as Maven Surefire writes
reruns that passed, so Jenkins shows it as flaky and counts it as passed. Each <testsuite>
carries the policy: property `flaky_policy` = `block` or `warn`.

A skipped testcase that leaves its case unproven (judge/signoff.py) carries the property
`skip_kind`: `no_gpu` (skipped for want of a GPU or driver) or `missing_module` (the case
environment lacks a module it imports); a skip for a declared requirement carries none.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from validate._compat import assert_never
from validate.judge.known_issues import result_pins
from validate.judge.signoff import passed_on_rerun, verdict_line
from validate.judge.suggest import normal_arch
from validate.model.axes import REGISTRY
from validate.model.outcome import Outcome, policy
from validate.plan.requirements import SkipKind, skip_kind
from validate.report.model import cell_label
from validate.report.speed import speed_properties
from validate.textsafe import redact

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from validate.model.outcome import FlakyPolicy, JUnitElement
    from validate.model.results import CaseResult
    from validate.report import Report
    from validate.report.ki_table import KITable
    from validate.report.model import StoredResult

__all__ = ["render_junit", "write_junit"]

_TAIL_CHARS = 8000
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # all below 0x20 but \t \n \r
#: The <testsuite> attribute that counts each element ("passed" is not written).
_COUNTERS: Final[Mapping[JUnitElement | None, str]] = {
    "failure": "failures",
    "error": "errors",
    "skipped": "skipped",
    None: "passed",
}


def _text(item: StoredResult, label: str) -> str:
    """The <system-out>: what the result says, then its output's tail. `label` is its cell's."""
    r = item.result
    tail = r.tail
    if not tail and (log := item.resolve(r.log_path)) is not None:
        tail = redact(log.read_text(encoding="utf-8", errors="replace")[-_TAIL_CHARS:])
    head = [f"outcome: {r.outcome}", f"cell: {label}"]
    head += [f"reason: {r.reason}"] if r.reason else []
    head += [f"known issue: {r.known_issue}"] if r.known_issue else []
    head += [f"known-issue check: {r.ki_note}"] if r.ki_note else []
    head += [f"log: {r.log_path}"] if r.log_path else []
    return _clean("\n".join(head) + ("\n\n" + tail[-_TAIL_CHARS:] if tail else ""))


def _clean(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (ANSI escapes and other control characters)."""
    return _CONTROL.sub("", text)


def classname(r: CaseResult) -> str:
    """Dots only between axes, so Jenkins' package tree is backend > frontend > CUDA > driver and
    the class is the arch: `cudnn-9_24_0_43.fe-1_27_0.cuda-13_0.drv-580.sm90`. An optional axis
    adds its part only where the cell has a value (`...drv-580.sm90.py-3_12`)."""
    parts = []
    for axis in REGISTRY:
        value = r.cell.get(axis.name)
        if axis.optional and not value:
            continue
        text = str(value) if value else ("?" if axis.junit else "any")
        parts.append(f"{axis.junit}{text.replace('.', '_')}")
    return ".".join(parts)


def node_names(case: str) -> tuple[str, str] | None:
    """A pytest node id as pytest's own junitxml names it: (module path with dots, plus any test
    class; the test's name with its parameters), e.g. `test/python/test_mhas.py::TestA::test_b[x]`
    -> (`test.python.test_mhas.TestA`, `test_b[x]`); None for a case that is no node id."""
    file, sep, rest = case.partition("::")
    if not sep or not rest:
        return None
    *classes, name = rest.split("::")
    module = file.removesuffix(".py").replace("/", ".").replace("\\", ".")
    return ".".join([module, *classes]), name


def _attr(text: str) -> str:
    """An attribute value escaped as ElementTree escapes it: as element text, then quotes and
    the whitespace an attribute would lose."""
    text = _cdata(text)
    if '"' in text:
        text = text.replace('"', "&quot;")
    if "\r" in text:
        text = text.replace("\r", "&#13;")
    if "\n" in text:
        text = text.replace("\n", "&#10;")
    if "\t" in text:
        text = text.replace("\t", "&#09;")
    return text


def _cdata(text: str) -> str:
    """Element text escaped as ElementTree escapes it."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    return text


def _open(tag: str, attrs: Iterable[tuple[str, str]]) -> str:
    """A start tag without its closing `>`."""
    return "<" + tag + "".join(f' {k}="{_attr(v)}"' for k, v in attrs)


def _leaf(tag: str, attrs: Iterable[tuple[str, str]], text: str | None = None) -> str:
    """An element without children, as ElementTree writes it (`<tag a="v" />` when empty)."""
    head = _open(tag, attrs)
    return f"{head}>{_cdata(text)}</{tag}>" if text else head + " />"


def _parent(tag: str, attrs: Iterable[tuple[str, str]], children: list[str], level: int) -> str:
    """An element holding `children` (their text), indented as ElementTree.indent does."""
    head = _open(tag, attrs)
    if not children:
        return head + " />"
    inner = _INDENT[level + 1]
    return f"{head}>{inner}{inner.join(children)}{_INDENT[level]}</{tag}>"


_INDENT: Final = tuple("\n" + "  " * level for level in range(5))


def _props(props: Iterable[tuple[str, str]], level: int) -> str:
    leaves = [_leaf("property", (("name", n), ("value", v))) for n, v in props]
    return _parent("properties", (), leaves, level)


class _Cases:
    """The <testcase> elements of a report: what repeats across cells is worked out once."""

    def __init__(self, flaky: FlakyPolicy) -> None:
        self.flaky = flaky
        #: case -> its name and the classname's part after the cell's, escaped (None: no node id)
        self._names: dict[str, tuple[str, str] | None] = {}
        self._skips: dict[str, SkipKind] = {}
        self._reasons: dict[str, str] = {}  # reason -> without control characters
        self._skipped: dict[str, str] = {}  # reason -> its <skipped> element
        #: what a result without tail or log says -> its <system-out> element
        self._outs: dict[tuple[object, ...], str] = {}

    def testcase(self, item: StoredResult, cell_class: str, label: str) -> tuple[str, str]:
        """The element (at level 2) and the <testsuite> counter it adds to. `cell_class` is
        the classname of the suite's cell, escaped."""
        r = item.result
        case_name = r.case
        names = self._names.get(case_name, _UNSET)
        if names is _UNSET:
            found = node_names(case_name)
            names = self._names[case_name] = (
                None if found is None else (_attr(found[1]), "." + _attr(found[0]))
            )
        if names is None:
            name, klass = _attr(case_name), cell_class
        else:
            name, klass = names[0], cell_class + names[1]
        head = f'<testcase name="{name}" classname="{klass}" time="{r.duration_s:.3f}">'
        raw = r.reason or str(r.outcome)
        reason = self._reasons.get(raw)
        if reason is None:
            reason = self._reasons[raw] = _clean(raw)
        rule = policy(r.outcome)
        element = rule.junit
        children = []
        if passed_on_rerun(r):
            props = [("flaky", "true"), ("attempts", "/".join(r.attempts))]
            children.append(_props(props, 3))
            if self.flaky == "warn" and element in ("failure", "error"):
                tag = "flakyFailure" if element == "failure" else "flakyError"
                about = (("message", reason), ("type", str(r.outcome)))
                children.append(_leaf(tag, about, _clean(r.tail or reason)))
                children.append(self._system_out(item, label))
                return f"{head}{_CASE_IN}{_CASE_IN.join(children)}{_CASE_OUT}", _COUNTERS[None]
        if (
            r.outcome is Outcome.SKIP
            and (kind := self._skip_kind(r.reason)) is not SkipKind.EXPECTED
        ):
            children.append(_props([("skip_kind", str(kind))], 3))
        match element:
            case "failure":
                about = (("message", reason), ("type", str(r.outcome)))
                children.append(_leaf("failure", about, _clean(r.tail or reason)))
            case "error":
                about = (("message", reason), ("type", str(r.outcome)))
                children.append(_leaf("error", about, reason))
            case "skipped" if rule.status == "known":  # xfail: name the known issue
                message = f"{r.outcome} {r.known_issue}: {reason}"
                children.append(_leaf("skipped", (("type", str(r.outcome)), ("message", message))))
            case "skipped":
                skipped = self._skipped.get(reason)
                if skipped is None:
                    skipped = self._skipped[reason] = _leaf("skipped", (("message", reason),))
                children.append(skipped)
            case None:
                pass
            case _:
                assert_never(element)
        children.append(self._system_out(item, label))
        return f"{head}{_CASE_IN}{_CASE_IN.join(children)}{_CASE_OUT}", _COUNTERS[element]

    def _system_out(self, item: StoredResult, label: str) -> str:
        r = item.result
        if r.tail or r.log_path:
            return _leaf("system-out", (), _text(item, label))
        key = (r.outcome, label, r.reason, r.known_issue, r.ki_note)  # all _text reads then
        out = self._outs.get(key)
        if out is None:
            out = self._outs[key] = _leaf("system-out", (), _text(item, label))
        return out

    def _skip_kind(self, reason: str) -> SkipKind:
        kind = self._skips.get(reason)
        if kind is None:
            kind = self._skips[reason] = skip_kind(reason)
        return kind


_CASE_IN: Final = "\n      "  # before each child of a <testcase> (ElementTree.indent's)
_CASE_OUT: Final = "\n    </testcase>"
_UNSET: Final = ("", "")  # not looked up yet (node_names gives None or a new tuple)


def _properties(ki: KITable, result: CaseResult, flaky: FlakyPolicy) -> list[tuple[str, str]]:
    """The sign-off's flaky policy, then the known-issue states of the suite's backend x frontend
    x arch, one property per issue."""
    props = [("flaky_policy", str(flaky))]
    p = result_pins(result)
    key = (p["backend"] or "?", p["frontend"] or "?", normal_arch(p["arch"]) or "?")
    index = next(
        (i for i, c in enumerate(ki.columns) if (c.cudnn, c.frontend, c.arch) == key), None
    )
    if index is None or not ki.rows:
        return props
    for row in ki.rows:
        cell = row.cells[index]
        props.append((_clean(f"ki.{row.issue.id}.{cell.column.junit}"), str(cell.state)))
    return props


def render_junit(report: Report) -> str:
    """One <testsuite> per cell (name = cell label) inside <testsuites>; totals on both levels."""
    chunks: list[str] = []
    write_junit(report, chunks.append)
    return "".join(chunks)


def _verdict_comment(report: Report) -> str:
    """The verdict line as the document's first comment (no JUnit element holds it): escaped as
    element text, without the characters XML cannot carry and without a `--`, which would end
    the comment."""
    line = _cdata(_clean(verdict_line(report.verdict))).replace("\n", " ")
    while "--" in line:
        line = line.replace("--", "- -")
    return f"<!-- {line} -->\n"


def write_junit(report: Report, write: Callable[[str], object]) -> None:
    """render_junit's text, in pieces, to `write` (e.g. a file's write)."""
    suites: dict[str, list[StoredResult]] = {}
    cell, cell_id, members = None, None, []  # the last result's cell and its suite's list
    for item in report.runs.items:
        r = item.result
        if r.cell is not cell or r.cell_id != cell_id:  # results come cell by cell
            cell, cell_id = r.cell, r.cell_id
            members = suites.setdefault(cell_label(r), [])  # the label of its pins (or id)
        members.append(item)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    flaky = report.verdict.flaky_policy
    cases = _Cases(flaky)
    body: list[tuple[str, list[str]]] = []  # per suite: its start tag and properties, its cases
    for label, items in suites.items():
        props = _properties(report.ki_table, items[0].result, flaky)
        props += [(_clean(p), t) for p, t in speed_properties(report, items[0].result.cell_id)]
        counts = {"tests": len(items), "failures": 0, "errors": 0, "skipped": 0, "passed": 0}
        cell_class = _attr(classname(items[0].result))  # one cell per suite
        children = []
        for item in items:
            text, counter = cases.testcase(item, cell_class, label)
            children.append(text)
            counts[counter] += 1
        time = sum(i.result.duration_s for i in items)
        total_time += time
        attrs = [("name", label), *((key, str(counts[key])) for key in totals)]
        head = _open("testsuite", [*attrs, ("time", f"{time:.3f}")])
        body.append((f"{head}>{_INDENT[2]}{_props(props, 2)}", children))
        for key in totals:
            totals[key] += counts[key]
    attrs = [("name", "cudnn-matrix"), *((k, str(v)) for k, v in totals.items())]
    attrs.append(("time", f"{total_time:.3f}"))
    write('<?xml version="1.0" encoding="UTF-8"?>\n')
    write(_verdict_comment(report))
    if not body:
        write(_parent("testsuites", attrs, [], 0) + "\n")
        return
    write(_open("testsuites", attrs) + ">")
    for head, children in body:
        write(_INDENT[1] + head)
        # ~100 KB a write: malloc reuses pieces that size; larger ones are fresh pages each time
        for start in range(0, len(children), 200):
            write(_INDENT[2] + _INDENT[2].join(children[start : start + 200]))
        write(_INDENT[1] + "</testsuite>")
    write(_INDENT[0] + "</testsuites>\n")
