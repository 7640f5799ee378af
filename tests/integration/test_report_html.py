"""Render the HTML report and load it in real headless Chromium over the DevTools protocol.

Chromium is driven through ``--remote-debugging-pipe`` (CDP messages, NUL-separated JSON, on fds
3/4): no websocket library and no TCP port. The test collects ``Runtime.exceptionThrown``,
``Runtime.consoleAPICalled`` (error/assert) and ``Log.entryAdded`` (error) events, clicks a cell,
and takes a screenshot with ``Page.captureScreenshot``, decoded by a tiny zlib+struct PNG reader.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import struct
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from usercli import cli

from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.report import render
from validate.report.model import RunInfo, merge_runs
from validate.report.store import build_report, load_known_issue_db, load_runs

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "resources" / "runs" / "example"
#: A real CPU-only run (`validate --cudnn 9.24.0.43` on a machine without a driver: 13 cells of one
#: backend, every GPU case skipped): the wide grid, one row by thirteen columns.
CPU_RUN = REPO / "tests" / "resources" / "runs" / "cpu"
#: The committed GPU run(s) reports/compat.* are rendered from.
DOCS_RUNS = tuple((REPO / "reports" / "DOCS_RUNS").read_text(encoding="utf-8").split())
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_TIMEOUT = 60.0


def _high_pipe() -> tuple[int, int]:
    """A pipe whose fds are >= 10, so the child's 3/4 redirections can never collide with them."""
    fds = []
    for fd in os.pipe():
        fds.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return fds[0], fds[1]


class _Chromium:
    """Headless Chromium with a CDP pipe; one page target attached in flat session mode."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None
        to_child, self._w = _high_pipe()
        self._r, from_child = _high_pipe()
        args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "--window-size=1280,900",
            "about:blank",
        ]
        # bash puts the pipe ends on fds 3 (commands in) and 4 (replies out), as Chromium expects
        script = f'exec "$0" "$@" 3<&{to_child} 4>&{from_child} {to_child}<&- {from_child}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, CHROMIUM, *args],
            pass_fds=(to_child, from_child),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                msg = f"chromium closed the CDP pipe (exit {self.proc.poll()})"
                raise RuntimeError(msg)
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def send(self, method: str, params: dict[str, Any] | None = None, *, page: bool = True) -> Any:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if page and self.session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + _TIMEOUT
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    msg_0 = f"{method}: {reply['error']}"
                    raise RuntimeError(msg_0)
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(method)

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + _TIMEOUT
        for event in self.events:
            if event.get("method") == method:
                return event
        while time.monotonic() < deadline:
            event = self._read()
            self.events.append(event)
            if event.get("method") == method:
                return event
        raise TimeoutError(method)

    def open(self, url: str, width: int = 1280, height: int = 900) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, page=False)["targetId"]
        attach = {"targetId": target, "flatten": True}
        self.session = self.send("Target.attachToTarget", attach, page=False)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable")
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics)
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])

    def console_errors(self) -> list[str]:
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description") or details["text"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError, TimeoutError):
            self.send("Browser.close", page=False)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG into (width, height, pixel byte strings)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in (2, 6) or interlace:
        msg = f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}"
        raise ValueError(msg)
    bpp = 4 if colour == 6 else 3
    raw, stride = zlib.decompress(idat), width * bpp
    prev, rows = bytearray(stride), []
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    pixels = [row[x : x + 3] for row in rows for x in range(0, stride, bpp)]
    return width, height, pixels


def _load(page: Path, tmp_path: Path, width: int = 1280) -> tuple[_Chromium, bytes]:
    browser = _Chromium(tmp_path / "profile")
    try:
        browser.open(page.resolve().as_uri(), width=width)
        return browser, browser.screenshot()
    except BaseException:
        browser.close()
        raise


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        reason = "Debian chromium not installed (apt-get install -y chromium; .ci/run does it)"
        if os.environ.get("CUDNN_MATRIX_REQUIRE_BROWSER") == "1":  # CI: the tier must run
            pytest.fail(f"CUDNN_MATRIX_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return CHROMIUM


@pytest.mark.usefixtures("chromium")
def test_html_report_in_headless_chromium(tmp_path: Path) -> None:
    runs = load_runs([EXAMPLE])
    report = build_report(
        runs, known_issues=load_known_issue_db(None, runs.runs), link_base=tmp_path
    )
    page = tmp_path / "compat.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    browser, png = _load(page, tmp_path)
    try:
        # the page opened the first regression's drill-down on load; click another cell too
        assert "crash" in browser.evaluate("document.getElementById('detail').textContent")
        clicked = browser.evaluate(
            "var td = document.querySelector('td.st-error'); td.click();"
            "document.getElementById('detail').textContent"
        )
        assert "pin not honoured" in clicked
        assert browser.evaluate("document.querySelectorAll('td.cell').length") == 16
        # each result is collapsed; its environment, put back together from the shared parts
        shown = browser.evaluate(
            "var r = document.querySelector('#detail > details');"
            "var pre = r.querySelectorAll('details > pre'); [r.open, pre[pre.length - 1].textContent]"
        )
        errors = browser.console_errors()
    finally:
        browser.close()
    assert errors == []
    error = next(i.result for i in runs.items if i.result.outcome == "error")
    assert shown[0] is False
    assert error.env
    assert json.loads(shown[1]) == json.loads(json.dumps(dict(error.env), default=str))
    width, height, pixels = _png_pixels(png)
    assert (width, height) == (1280, 900)
    colours = Counter(pixels)
    assert len(colours) > 50, "screenshot looks blank"
    assert colours.most_common(1)[0][1] < 0.95 * len(pixels)
    # the matrix colours are on screen: green (pass), red (regression), yellow (known issue)
    for rgb in ((0x34, 0xD0, 0x58), (0xD7, 0x3A, 0x49), (0xF9, 0xC5, 0x13)):
        assert colours[bytes(rgb)] > 100, rgb


@pytest.mark.usefixtures("chromium")
def test_harness_sees_console_errors_and_blank_pages(tmp_path: Path) -> None:
    """The checks above can fail: a script error is reported and a blank page is flagged."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><head><link rel='icon' href='data:,'></head><body>"
        "<script>console.error('boom'); missingFunction();</script></body></html>"
    )
    browser, png = _load(page, tmp_path)
    try:
        errors = browser.console_errors()
    finally:
        browser.close()
    assert any("boom" in e for e in errors)
    assert any("missingFunction is not defined" in e for e in errors)
    _, _, pixels = _png_pixels(png)
    assert len(Counter(pixels)) == 1  # nothing drawn: the blank check would fail this page


#: What the layout test reads from the page at 1400 x 900, before any scrolling.
_LAYOUT = """JSON.stringify({
  scrollY: window.scrollY,
  verdict: document.getElementById("verdict").getBoundingClientRect().toJSON(),
  verdictText: document.getElementById("verdict").firstChild.textContent,
  band: document.getElementById("ki-band").getBoundingClientRect().toJSON(),
  bandLines: Array.from(document.querySelectorAll("#ki-band li"), li => li.textContent),
  gridScroll: document.getElementById("grid").scrollWidth,
  gridClient: document.getElementById("grid").clientWidth,
  tablesRight: Array.from(document.querySelectorAll("#grid table"), t => t.getBoundingClientRect().right),
  pageScroll: document.documentElement.scrollWidth,
  notes: document.querySelector("ul.notes").textContent,
  openCases: document.querySelectorAll("details[open] table.cases").length,
  order: ["verdict", "ki-band", "grid"].map(id => document.getElementById(id).getBoundingClientRect().top)
})"""


@pytest.mark.usefixtures("chromium")
@pytest.mark.parametrize("runs", [DOCS_RUNS, (str(CPU_RUN),)], ids=["committed-gpu", "cpu"])
def test_top_of_the_page_in_a_1400_window(tmp_path: Path, runs: tuple[str, ...]) -> None:
    """The real CLI renders the page; at 1400 x 900 the verdict banner and the known-issue band are
    in the first viewport (above the grid), the grid fits the width, footnotes are whole and the
    case matrix is collapsed."""
    page = tmp_path / "compat.html"
    argv = ["report", "--format", "html", "--out", page.name]
    argv += [a for run in runs for a in ("--results", str(REPO / run))]
    proc = cli(*argv, cwd=tmp_path, timeout=None)
    assert proc.returncode in (0, 1), proc.stderr
    verdict_line = next(line for line in proc.stderr.splitlines() if "SIGNED OFF" in line)
    browser, png = _load(page, tmp_path, width=1400)
    try:
        layout = json.loads(browser.evaluate(_LAYOUT))
        errors = browser.console_errors()
    finally:
        browser.close()
    assert errors == []
    assert layout["scrollY"] == 0
    assert layout["verdictText"] == verdict_line
    for part in ("verdict", "band"):
        assert layout[part]["top"] >= 0, part
        assert layout[part]["bottom"] <= 900, part
    assert layout["order"] == sorted(layout["order"])  # banner, then band, then grid
    issues = load_known_issue_db(None, load_runs([REPO / r for r in runs]).runs)
    assert [line.split(":", 1)[0] for line in layout["bandLines"]] == [ki.id for ki in issues]
    assert layout["gridScroll"] <= layout["gridClient"] <= 1400
    assert max(layout["tablesRight"]) <= 1400
    assert layout["pageScroll"] <= 1400
    assert "…" not in layout["notes"]
    assert layout["openCases"] == 0
    # the banner's colour is on screen: red when blocked, amber when only the GPU is missing
    colour = (0xFF, 0xEE, 0xF0) if proc.returncode == 1 else (0xFF, 0xF5, 0xB1)
    _, _, pixels = _png_pixels(png)
    assert Counter(pixels)[bytes(colour)] > 5000, colour


@pytest.mark.usefixtures("chromium")
def test_a_grid_too_wide_either_way_is_split_into_tables_that_fit(tmp_path: Path) -> None:
    """20 backends x 15 frontend/arch columns fit 1,400 px neither as pivoted nor transposed: the
    page splits the columns over several tables, each within the window, every cell once."""
    results = [
        CaseResult(
            case="a.py",
            outcome=Outcome.FAIL if n % 3 else Outcome.PASS,
            reason="x",
            cell={
                "cudnn": f"9.{n}.0.1",
                "frontend": fe,
                "cuda": "13.0",
                "driver": "580",
                "arch": arch,
            },
            cell_id=f"{n}-{fe}-{arch}",
        )
        for n in range(10, 30)
        for fe in ("1.26.0", "1.27.0", "1.32.0")
        for arch in ("sm80", "sm90", "sm100", "sm103", "sm120")
    ]
    report = build_report(merge_runs([(RunInfo(run_id="wide", path=tmp_path), results)]))
    page = tmp_path / "wide.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    browser, _ = _load(page, tmp_path, width=1400)
    try:
        layout = json.loads(browser.evaluate(_LAYOUT))
        keys = browser.evaluate(
            "Array.from(document.querySelectorAll('#grid td.cell'), td => td.dataset.cell)"
        )
        errors = browser.console_errors()
    finally:
        browser.close()
    assert errors == []
    assert len(layout["tablesRight"]) > 1
    assert max(layout["tablesRight"]) <= 1400
    assert layout["gridScroll"] <= layout["gridClient"]
    assert layout["pageScroll"] <= 1400
    assert sorted(keys) == sorted({f"{r}:{c}" for r in range(20) for c in range(15)})


#: Each distinct non-ASCII, non-space character of the page's text, drawn on a canvas in the font
#: of the element that holds it, compared with what that font draws for a code point no font has
#: (U+10FFFD: the .notdef box) and for a space: a glyph the stock fonts lack draws as the box.
_GLYPHS = r"""(function () {
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), seen = {}, node;
  while ((node = walker.nextNode())) {
    var parent = node.parentElement;
    if (parent.closest("script, style")) { continue; }
    var font = getComputedStyle(parent).font.replace(/\d+(\.\d+)?px( \/ [\d.]+px)?/, "40px");
    for (var ch of node.textContent) {
      if (ch.codePointAt(0) > 127 && !/\s/.test(ch) && !(ch in seen)) { seen[ch] = font; }
    }
  }
  var canvas = document.createElement("canvas");
  canvas.width = canvas.height = 64;
  var ctx = canvas.getContext("2d", {willReadFrequently: true});
  function draw(ch, font) {
    ctx.clearRect(0, 0, 64, 64);
    ctx.font = font; ctx.fillStyle = "#000"; ctx.textBaseline = "top";
    ctx.fillText(ch, 4, 4);
    return Array.from(ctx.getImageData(0, 0, 64, 64).data).join(",");
  }
  var bad = [];
  for (var ch in seen) {
    var got = draw(ch, seen[ch]);
    if (got === draw("\u{10FFFD}", seen[ch]) || got === draw(" ", seen[ch])) { bad.push(ch); }
  }
  return JSON.stringify({checked: Object.keys(seen), bad: bad});
})()"""

#: Every mark a grid cell refers to (`[1]`, `[2,1]`, `[s1,s2]`) and every link within the page
#: (`#signoff`), and those no element on the page defines (`note-<mark>`, whose text starts with
#: `[<mark>]`; the link's id).
_REFERENCES = r"""(function () {
  var refs = [], missing = [];
  document.querySelectorAll("a[href^='#']").forEach(function (a) {
    refs.push(a.getAttribute("href"));
    if (!document.getElementById(a.getAttribute("href").slice(1))) { missing.push(a.getAttribute("href")); }
  });
  document.querySelectorAll("#grid td.cell").forEach(function (td) {
    (td.textContent.match(/\[[^\]]+\]/g) || []).forEach(function (group) {
      group.slice(1, -1).split(",").forEach(function (mark) {
        refs.push(mark);
        var note = document.getElementById("note-" + mark);
        if (!note || note.textContent.indexOf("[" + mark + "]") !== 0) { missing.push(mark); }
      });
    });
  });
  return JSON.stringify({refs: refs, missing: missing});
})()"""


@pytest.mark.usefixtures("chromium")
@pytest.mark.parametrize("runs", [DOCS_RUNS, (str(CPU_RUN),)], ids=["committed-gpu", "cpu"])
def test_every_mark_draws_and_every_reference_is_defined(
    tmp_path: Path, runs: tuple[str, ...]
) -> None:
    """The page the CLI renders, in Chromium with Debian's stock fonts: no character of its text
    draws as the empty .notdef box (⏱ did), every [n]/[sN] a grid cell shows is defined on the
    page, and a run without a GPU has no green cell."""
    page = tmp_path / "compat.html"
    argv = ["report", "--format", "html", "--out", page.name]
    argv += [a for run in runs for a in ("--results", str(REPO / run))]
    proc = cli(*argv, cwd=tmp_path, timeout=None)
    assert proc.returncode in (0, 1), proc.stderr
    browser, _ = _load(page, tmp_path, width=1400)
    try:
        glyphs = json.loads(browser.evaluate(_GLYPHS))
        refs = json.loads(browser.evaluate(_REFERENCES))
        backgrounds = browser.evaluate(
            "Array.from(document.querySelectorAll('#grid td.cell'),"
            " td => getComputedStyle(td).backgroundColor)"
        )
        slow_marks = browser.evaluate("document.querySelectorAll('#grid svg.mark').length")
        errors = browser.console_errors()
    finally:
        browser.close()
    assert errors == []
    assert {"✓", "—", "·"} <= set(glyphs["checked"])
    assert glyphs["bad"] == []
    assert "#signoff" in refs["refs"]
    assert any(not r.startswith("#") for r in refs["refs"]), "no marks in the grid: nothing checked"
    assert refs["missing"] == []
    green = "rgb(52, 208, 88)"  # COLOURS["pass"]
    if runs == DOCS_RUNS:  # the speed marks [sN] are on this grid, drawn as SVG
        assert any(r.startswith("s") for r in refs["refs"])
        assert slow_marks > 0
        assert green in backgrounds
    else:  # no GPU: what passed is the pin check, every GPU case skipped; not green
        assert backgrounds
        assert green not in backgrounds
        assert "rgb(255, 223, 93)" in backgrounds  # COLOURS["unproven"]


@pytest.mark.usefixtures("chromium")
def test_the_glyph_and_reference_checks_can_fail(tmp_path: Path) -> None:
    """A ⏱ as text (what the page had) is found as a glyph that draws as a box, and a mark
    without its note as undefined."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'></head>"
        "<body><a href='#gone'>x</a><div id='grid'><table><tr><td class='cell'>✓ 2 · \u23f1 "
        "[s1,1]</td></tr></table></div><ul><li id='note-1'>[1] skip: x</li></ul></body></html>",
        encoding="utf-8",
    )
    browser, _ = _load(page, tmp_path)
    try:
        glyphs = json.loads(browser.evaluate(_GLYPHS))
        refs = json.loads(browser.evaluate(_REFERENCES))
    finally:
        browser.close()
    assert glyphs["bad"] == ["\u23f1"]
    assert refs == {"refs": ["#gone", "s1", "1"], "missing": ["#gone", "s1"]}
