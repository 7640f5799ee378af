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
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Final

from validate._compat import assert_never
from validate.judge.known_issues import result_pins
from validate.judge.signoff import passed_on_rerun
from validate.judge.suggest import normal_arch
from validate.model.axes import REGISTRY
from validate.model.outcome import Outcome, policy
from validate.plan.requirements import SkipKind, skip_kind
from validate.report.model import cell_label
from validate.report.speed import speed_properties
from validate.textsafe import redact

if TYPE_CHECKING:
    from collections.abc import Mapping

    from validate.model.outcome import FlakyPolicy, JUnitElement
    from validate.model.results import CaseResult
    from validate.report import Report
    from validate.report.ki_table import KITable
    from validate.report.model import StoredResult

__all__ = ["render_junit"]

_TAIL_CHARS = 8000
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # all below 0x20 but \t \n \r
#: The <testsuite> attribute that counts each element ("passed" is not written).
_COUNTERS: Final[Mapping[JUnitElement | None, str]] = {
    "failure": "failures",
    "error": "errors",
    "skipped": "skipped",
    None: "passed",
}


def _text(item: StoredResult) -> str:
    r = item.result
    tail = r.tail
    if not tail and (log := item.resolve(r.log_path)) is not None:
        tail = redact(log.read_text(encoding="utf-8", errors="replace")[-_TAIL_CHARS:])
    head = [f"outcome: {r.outcome}", f"cell: {cell_label(r)}"]
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


def _testcase(parent: ET.Element, item: StoredResult, flaky: FlakyPolicy, cell_class: str) -> str:
    r = item.result
    names = node_names(r.case)
    name, klass = (r.case, cell_class) if names is None else (names[1], f"{cell_class}.{names[0]}")
    case = ET.SubElement(parent, "testcase", name=name, classname=klass, time=f"{r.duration_s:.3f}")
    reason = _clean(r.reason or str(r.outcome))
    rule = policy(r.outcome)
    element = rule.junit
    if passed_on_rerun(r):
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="flaky", value="true")
        ET.SubElement(props, "property", name="attempts", value="/".join(r.attempts))
        if flaky == "warn" and element in ("failure", "error"):
            tag = "flakyFailure" if element == "failure" else "flakyError"
            ET.SubElement(case, tag, message=reason, type=str(r.outcome)).text = _clean(
                r.tail or reason
            )
            ET.SubElement(case, "system-out").text = _text(item)
            return _COUNTERS[None]
    if r.outcome is Outcome.SKIP and (kind := skip_kind(r.reason)) is not SkipKind.EXPECTED:
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="skip_kind", value=str(kind))
    match element:
        case "failure":
            ET.SubElement(case, "failure", message=reason, type=str(r.outcome)).text = _clean(
                r.tail or reason
            )
        case "error":
            ET.SubElement(case, "error", message=reason, type=str(r.outcome)).text = reason
        case "skipped" if rule.status == "known":  # xfail: name the known issue
            message = f"{r.outcome} {r.known_issue}: {reason}"
            ET.SubElement(case, "skipped", type=str(r.outcome), message=message)
        case "skipped":
            ET.SubElement(case, "skipped", message=reason)
        case None:
            pass
        case _:
            assert_never(element)
    ET.SubElement(case, "system-out").text = _text(item)
    return _COUNTERS[element]


def _properties(suite: ET.Element, ki: KITable, result: CaseResult, flaky: FlakyPolicy) -> None:
    """The sign-off's flaky policy, then the known-issue states of the suite's backend x frontend
    x arch, one property per issue."""
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="flaky_policy", value=flaky)
    p = result_pins(result)
    key = (p["backend"] or "?", p["frontend"] or "?", normal_arch(p["arch"]) or "?")
    index = next(
        (i for i, c in enumerate(ki.columns) if (c.cudnn, c.frontend, c.arch) == key), None
    )
    if index is None or not ki.rows:
        return
    for row in ki.rows:
        cell = row.cells[index]
        name = _clean(f"ki.{row.issue.id}.{cell.column.junit}")
        ET.SubElement(props, "property", name=name, value=str(cell.state))


def render_junit(report: Report) -> str:
    """One <testsuite> per cell (name = cell label) inside <testsuites>; totals on both levels."""
    root = ET.Element("testsuites", name="cudnn-matrix")
    suites: dict[str, list[StoredResult]] = {}
    for item in report.runs.items:
        suites.setdefault(cell_label(item.result), []).append(item)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for label, items in suites.items():
        suite = ET.SubElement(root, "testsuite", name=label)
        _properties(suite, report.ki_table, items[0].result, report.verdict.flaky_policy)
        for prop, text in speed_properties(report, items[0].result.cell_id):
            ET.SubElement(suite[0], "property", name=_clean(prop), value=text)  # <properties>
        counts = {"tests": len(items), "failures": 0, "errors": 0, "skipped": 0, "passed": 0}
        cell_class = classname(items[0].result)  # one cell per suite
        for item in items:
            counts[_testcase(suite, item, report.verdict.flaky_policy, cell_class)] += 1
        time = sum(i.result.duration_s for i in items)
        total_time += time
        for key in totals:
            suite.set(key, str(counts[key]))
            totals[key] += counts[key]
        suite.set("time", f"{time:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
