"""What every section of the HTML page shares: the colour of each status, the stylesheet and the
script (inline: the page needs no network), escaping, and which results the page carries."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Final

from validate.judge.signoff import passed_on_rerun
from validate.model.outcome import policy
from validate.report.case_matrix import test_file
from validate.report.ki_table import KIState
from validate.report.speed import SLOW_SYMBOL

if TYPE_CHECKING:
    from validate.report.model import StoredResult

__all__ = ["COLOURS", "CSS", "JS", "KI_COLOURS", "carried", "code", "esc", "marks", "rank"]


COLOURS: Final = {
    "regression": ("#d73a49", "regression: fail / crash / timeout"),
    "error": ("#e36209", "infra error (environment or harness)"),
    "flaky": ("#b392f0", "≈ flaky: did not pass, then passed on a re-run"),
    "known": ("#f9c513", "known issue reproduced (xfail)"),
    "xpass": ("#79b8ff", "xpass: known issue did not reproduce (fixed?)"),
    "pass": ("#34d058", "all ran cases passed"),
    # amber, the no-GPU banner's hue: what passed is real, but GPU cases were not run
    "unproven": ("#ffdf5d", "passed, but GPU cases skipped for want of a GPU: not proven"),
    "skip": ("#d1d5da", "only skipped"),
    "empty": ("#ffffff", "not run"),
}


#: Known-issues table colours, one per state.
KI_COLOURS: Final = {
    KIState.AFFECTED: "#f9c513",
    KIState.OUTSIDE: "#d73a49",
    KIState.FIXED: "#34d058",
    KIState.NOT_REPRODUCED: "#c8e1ff",
    KIState.NOT_COVERED: "#ffffff",
    KIState.NOT_RUN: "#e1e4e8",
}


CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#24292e;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:20px 0 6px} .sub{color:#586069;margin:0 0 8px}
#verdict{padding:10px 14px;border-radius:6px;margin:0 0 10px;font-size:17px;font-weight:600}
#verdict .why{font-size:13px;font-weight:400;margin-top:2px}
.v-signed{background:#dcffe4;border:2px solid #28a745;color:#144620}
.v-blocked{background:#ffeef0;border:2px solid #d73a49;color:#86181d}
.v-unproven{background:#fff5b1;border:2px solid #dbab09;color:#5c4400}
#ki-band{margin:0 0 12px;padding:0;list-style:none}
#ki-band li{padding:3px 0 3px 8px;border-left:6px solid #e1e4e8;margin:2px 0}
#ki-band li.quiet{color:#6a737d}
#grid{max-width:100%;overflow-x:auto} #grid table{margin:0 0 8px}
table.matrix{border-collapse:collapse;background:#fff}
.matrix th,.matrix td{border:1px solid #959da5;padding:6px 8px;text-align:left;white-space:nowrap}
.matrix th{background:#f1f3f5} td.cell{cursor:pointer} td.cell:focus,td.sel{outline:3px solid #0366d6}
.scroll{max-width:100%;overflow-x:auto}
svg.mark{vertical-align:-0.15em}
.legend span.sw{display:inline-block;width:14px;height:14px;border:1px solid #959da5;margin:0 4px 0 12px;vertical-align:middle}
ul.notes li{white-space:pre-wrap;overflow-wrap:anywhere} ul.tests li{overflow-wrap:anywhere}
#detail{margin-top:12px;padding:8px 12px;border:1px solid #959da5;background:#fff;min-height:40px}
#detail details{border-top:1px solid #e1e4e8;padding:4px 0} #detail summary{cursor:pointer}
.badge{padding:1px 6px;border-radius:3px;color:#000}
table.meta{border-collapse:collapse;margin:0 0 12px} .meta th,.meta td{padding:2px 12px 2px 0;text-align:left;vertical-align:top}
.meta th{font-weight:600;white-space:nowrap} .meta td{overflow-wrap:anywhere}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:320px;white-space:pre-wrap} dt{font-weight:600} dd{margin:0 0 4px 16px}
"""


JS = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var detail = document.getElementById("detail");
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  function row(dl, name, value) {
    if (value === undefined || value === null || value === "" ) { return; }
    dl.appendChild(el("dt", name)); dl.appendChild(el("dd", value));
  }
  function environment(refs) {
    // a result's environment: interned [path, value] parts (most are shared by a cell's results)
    var out = {};
    refs.forEach(function (n) {
      var part = data.env_parts[n], at = out, path = part[0];
      for (var k = 0; k < path.length - 1; k++) { at = at[path[k]] = at[path[k]] || {}; }
      at[path[path.length - 1]] = part[1];
    });
    return out;
  }
  function show(td) {
    document.querySelectorAll("td.sel").forEach(function (x) { x.classList.remove("sel"); });
    td.classList.add("sel");
    detail.textContent = "";
    detail.appendChild(el("h2", td.getAttribute("data-label")));
    (data.cells[td.getAttribute("data-cell")] || []).forEach(function (i) {
      var r = data.results[i], sec = el("details"), h = el("summary", r.case + " ");
      var badge = el("span", r.outcome, "badge");
      badge.style.background = data.colours[r.status];
      h.appendChild(badge);
      if (r.reason) { h.appendChild(document.createTextNode(" " + r.reason.split("\\n")[0].slice(0, 160))); }
      sec.appendChild(h);
      var dl = el("dl");
      row(dl, "reason", r.reason); row(dl, "cell", r.label); row(dl, "known issue", r.known_issue);
      row(dl, "note", r.ki_note); row(dl, "duration", r.duration + " s");
      row(dl, "attempts", r.attempts); row(dl, "signal", r.signal); row(dl, "exit code", r.exit_code);
      sec.appendChild(dl);
      if (r.logs.length) {
        var p = el("p", "logs: ");
        r.logs.forEach(function (l) { var a = el("a", l.name); a.href = l.href; p.appendChild(a); p.appendChild(document.createTextNode(" ")); });
        sec.appendChild(p);
      }
      if (r.tail) { var t = el("details"); t.appendChild(el("summary", "output tail")); t.appendChild(el("pre", r.tail)); sec.appendChild(t); }
      var env = el("details"); env.appendChild(el("summary", "environment"));
      env.appendChild(el("pre", JSON.stringify(environment(r.env), null, 2))); sec.appendChild(env);
      detail.appendChild(sec);
    });
    var omitted = data.omitted[td.getAttribute("data-cell")];
    if (omitted) { detail.appendChild(el("p", omitted + " pytest test ids that passed or skipped are counted, not listed")); }
  }
  document.querySelectorAll("td.cell[data-cell]").forEach(function (td) {
    td.addEventListener("click", function () { show(td); });
    td.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { show(td); } });
  });
  var order = ["td.st-regression", "td.st-error", "td.st-known", "td.cell[data-cell]"];
  for (var i = 0; i < order.length; i++) {
    var first = document.querySelector(order[i]);
    if (first) { show(first); break; }
  }
})();
"""


def carried(item: StoredResult) -> bool:
    """Whether the page carries a result's details: all but a pytest test id's pass or skip."""
    r = item.result
    return (
        test_file(r.case) is None
        or passed_on_rerun(r)
        or policy(r.outcome).status
        not in (
            "pass",
            "skip",
        )
    )


def rank(item: StoredResult) -> int:
    """Worst first in a drill-down."""
    return policy(item.result.outcome).rank


def esc(value: object) -> str:
    return html.escape(str(value))


#: Marks that a stock browser's fonts lack (DejaVu, Liberation: Debian's Chromium drew ⏱ as an
#: empty box), drawn as inline SVG in the text's colour instead; the text formats keep the glyph.
_SVG_MARKS: Final = {
    SLOW_SYMBOL: (
        '<svg class="mark" viewBox="0 0 16 16" width="1em" height="1em" role="img" '
        'aria-label="slower"><circle cx="8" cy="9.5" r="5.5" fill="none" stroke="currentColor" '
        'stroke-width="1.6"/><path d="M8 9.5V6.5M6 2h4M8 2v2M12.6 4.4l1.2-1.2" fill="none" '
        'stroke="currentColor" stroke-width="1.6" stroke-linecap="round"/></svg>'
    ),
}


def marks(text: str) -> str:
    """Escaped text whose marks no stock font draws are inline SVG (`_SVG_MARKS`)."""
    out = html.escape(text)
    for glyph, svg in _SVG_MARKS.items():
        out = out.replace(glyph, svg)
    return out


def code(text: str) -> str:
    """Escaped text whose `backticked` spans (Markdown in shared legend strings) are <code>."""
    parts = html.escape(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: leave the text as it is
        return html.escape(text)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
