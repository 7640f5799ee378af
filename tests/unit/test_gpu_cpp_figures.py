"""bench/gpu_cpp_figures.py over the committed C++ GPU reports (issue #39 item 4): the figures
committed beside each report are what the script prints from that report's own files, and a
direct run that was cut short gives no agreement or ratio for its binary."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_cpp_figures.py"


def _figures(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    "name",
    [
        "2026-12-06-h100-cpp",
        "2026-12-07-h100-cpp-9.24",
        "2026-12-07-h100-cpp-9.25",
        "2026-12-08-h100-cpp-9.25-samples",
    ],
)
def test_the_committed_figures_are_the_scripts_output(name: str) -> None:
    folder = ROOT / "reports" / "gpu" / name
    proc = _figures(folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (folder / "figures.txt").read_text(encoding="utf-8")


def test_a_binary_ended_by_its_timeout_gives_no_agreement_and_no_ratio() -> None:
    """2026-12-07: `samples` was ended by `timeout 45` after Catch2 had written only the XML
    declaration; `tests` ran whole and agrees TEST_CASE by TEST_CASE."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-07-h100-cpp-9.24").stdout
    samples, tests = out.split("== 9.24.0.43 samples:")[1].split("== 9.24.0.43 tests:")
    assert "binary rc 124" in samples
    assert "the binary's JUnit is incomplete (rc 124: its `timeout` ended it)" in samples
    assert "agree" not in samples
    assert "TEST_CASEs: tool 18, binary 18, both 18" in tests
    assert "agree (pass/fail/skip): 18 of 18" in tests
    assert "no ratio: not every cell and target the tool ran has a whole direct run" in out
    assert "tool / direct binaries" not in out


def test_a_whole_direct_run_of_every_target_gives_the_ratios() -> None:
    """2026-12-07, 9.25.1.1: the tool ran `tests` only, cold and warm, and the binary ran to its
    end: the agreement, and each ratio from the committed walls (2.5 s and 70.0 s over 0.8 s)."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-07-h100-cpp-9.25").stdout
    assert "== 9.25.1.1 tests: binary rc 0, wall 0.8 s" in out
    assert "agree (pass/fail/skip): 18 of 18" in out
    assert "tool wall s: cold 70.0, warm 2.5" in out
    assert "warm tool / direct binaries: 3.12x" in out
    assert "cold tool / direct binaries: 87.50x" in out
    assert "no ratio" not in out


def test_test_cases_the_junit_left_out_come_from_the_xml_stream() -> None:
    """2026-12-08, 9.25.1.1: `samples` ran to its end, and its JUnit lacks the two causal_conv1d
    TEST_CASEs (no assertion, no output when they pass), which its stream.xml reports as passed:
    they are taken from there, every TEST_CASE agrees, and the ratios are printed."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-08-h100-cpp-9.25-samples").stdout
    samples = out.split("== 9.25.1.1 samples:")[1].split("== 9.25.1.1 tests:")[0]
    assert "binary rc 0, wall 374.4 s" in samples
    assert "its JUnit left out 2 TEST_CASEs that its streamed XML reports" in samples
    assert "'Causal conv1d backward', 'Causal conv1d forward'" in samples
    assert "TEST_CASEs: tool 117, binary 117, both 117" in samples
    assert "agree (pass/fail/skip): 117 of 117" in samples
    assert "differ" not in out
    assert "no ratio" not in out
    assert "warm tool / direct binaries:" in out


def test_the_test_case_sigterm_ended_is_not_compared_and_the_rest_are_not_reached() -> None:
    """2026-12-06: the driver's `timeout 480` sent SIGTERM while `Convolution fprop large` ran;
    Catch2's handler reported it as an error and wrote the JUnit whole, with 39 of the 117
    TEST_CASEs. That one is no failure of the sample, and the 78 after it are not-run."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-06-h100-cpp").stdout
    assert (
        "'Convolution fprop large' was running when the binary got SIGTERM (Catch2's error): "
        "not compared"
    ) in out
    assert "binary outcomes: {'pass': 27, 'sigterm': 1, 'skip': 11}" in out
    assert "agree (pass/fail/skip): 38 of 38" in out
    assert "differ" not in out
    assert "not reached by the binary: 78 of the tool's TEST_CASEs" in out
    assert "tool / direct binaries" not in out


def _catch2_xml(cases: list[tuple[str, str]]) -> str:
    """Catch2 3.3.2's XML reporter output (the layout its `-r xml` writes) for (name, outcome)."""
    head = '<?xml version="1.0" encoding="UTF-8"?>\n<Catch2TestRun name="samples" rng-seed="1">\n'
    body = ""
    for name, outcome in cases:
        success = "false" if outcome == "fail" else "true"
        skips = "1" if outcome == "skip" else "0"
        body += (
            f'  <TestCase name={quoteattr(name)} tags="[x]" filename="s.cpp" line="1">\n'
            f'    <OverallResult success="{success}" skips="{skips}"/>\n  </TestCase>\n'
        )
    return head + body + "</Catch2TestRun>\n"


def test_a_cut_binary_agrees_on_the_test_cases_its_xml_stream_finished(tmp_path: Path) -> None:
    """The samples binary of 2026-12-07 with a stream.xml cut inside its sixth TEST_CASE, whose
    fourth disagrees with the tool: agreement over the five it finished, the sixth named as
    running, the rest not reached, and still no ratio."""
    work = tmp_path / "w"
    with tarfile.open(ROOT / "reports/gpu/2026-12-07-h100-cpp-9.24/cpp.tgz") as tar:
        tar.extractall(work, filter="data")
    rows = [json.loads(x) for x in (work / "cold/run/results.jsonl").read_text().splitlines()]
    samples = [
        (r["case"].split("::", 1)[1], {"xpass": "pass"}.get(r["outcome"], r["outcome"]))
        for r in rows
        if r.get("case_path", "").endswith("/samples")
    ]
    cases = samples[:6]
    cases[3] = (cases[3][0], "fail" if cases[3][1] != "fail" else "pass")
    text = _catch2_xml(cases)
    cut = text.index("<OverallResult", text.index(cases[5][0])) + len("<OverallResult succ")
    (work / "direct/9.24.0.43/samples/stream.xml").write_text(text[:cut])
    folder = tmp_path / "report"
    folder.mkdir()
    with tarfile.open(folder / "cpp.tgz", "w:gz") as tar:
        tar.add(work, arcname=".")
    proc = _figures(folder)
    assert proc.returncode == 0, proc.stderr
    part = proc.stdout.split("== 9.24.0.43 samples:")[1].split("== 9.24.0.43 tests:")[0]
    assert "the binary's JUnit is incomplete (rc 124: its `timeout` ended it)" in part
    assert f"its streamed XML: 5 TEST_CASEs finished; {cases[5][0]!r} had started" in part
    assert "agree (pass/fail/skip): 4 of 5" in part
    assert f"differ: {cases[3][0]!r}" in part
    distinct = len(dict(samples))  # the xpass has two rows (its re-run with the API logs)
    assert f"not reached by the binary: {distinct - 5} of the tool's TEST_CASEs" in part
    assert "tool / direct binaries" not in proc.stdout


def test_a_whole_run_that_lacks_a_test_case_differs(tmp_path: Path) -> None:
    """The `tests` binary of 2026-12-07 ran to its end (rc 0); with one <testcase> taken out of
    its JUnit, that TEST_CASE is a difference (not 'not reached'), and there is no ratio."""
    work = tmp_path / "w"
    with tarfile.open(ROOT / "reports/gpu/2026-12-07-h100-cpp-9.24/cpp.tgz") as tar:
        tar.extractall(work, filter="data")
    junit = work / "direct/9.24.0.43/tests/junit.xml"
    tree = ET.parse(junit)
    suite = tree.getroot().find("testsuite")
    assert suite is not None
    first = suite.find("testcase")
    assert first is not None
    name = first.get("name")
    suite.remove(first)
    tree.write(junit, encoding="utf-8", xml_declaration=True)
    assert not junit.with_name("stream.xml").exists()  # this run wrote none to fill the gap
    folder = tmp_path / "report"
    folder.mkdir()
    with tarfile.open(folder / "cpp.tgz", "w:gz") as tar:
        tar.add(work, arcname=".")
    out = _figures(folder).stdout
    tests = out.split("== 9.24.0.43 tests:")[1]
    assert "binary rc 0" in tests
    assert "agree (pass/fail/skip): 17 of 18" in tests
    assert f"differ: {name!r}: tool pass, binary -" in tests
    assert "the binary ran 1 fewer TEST_CASEs than the tool" in tests
    assert "not reached" not in tests


def test_a_folder_without_the_archive_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _figures(tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"gpu_cpp_figures: {tmp_path / 'cpp.tgz'}: no such file"
