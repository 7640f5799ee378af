"""Output safety: undecodable bytes and control characters render escaped in every format, JUnit
stays valid XML, no escape sequence reaches the terminal, and secrets are redacted by value and
by name in every file the tool writes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest
from usercli import cli

from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, write_json
from validate.textsafe import display, redact

if TYPE_CHECKING:
    from pathlib import Path

ESC = "\x1b[31mred\x1b[0m\x07"
NOT_UTF8 = "caf\udce9"  # the byte 0xe9 as Python keeps an undecodable file name
SECRETS = {
    "url": "https://alice:hunter2@gitlab.example.com/repo.git",
    "gitlab": "glpat-" + "x" * 20,
    "github": "ghp_" + "A1" * 18,
    "hf": "hf_" + "b" * 34,
    "aws": "AKIA" + "Q" * 16,
    "ngc": "nvapi-" + "n" * 64,
    "named": "CI_JOB_TOKEN=abc123def",
}


def _hostile_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    store = ResultStore(run / "results.jsonl")
    pins = {
        "cudnn": "9.24.0.43",
        "frontend": "1.27.0",
        "cuda": "13.0",
        "driver": "580",
        "arch": "sm90",
    }
    store.append(
        CaseResult(
            case=f"{NOT_UTF8}_{ESC}.py",
            outcome=Outcome.FAIL,
            reason=f"boom {ESC} " + " ".join(SECRETS.values()),
            tail=f"tail {ESC}\x00\x0b",
            cell_id="c1",
            cell=pins,
            env={"HF_TOKEN": "plain-value-of-a-secret-name"},
        )
    )
    store.seal()
    write_json(run / "run.json", {"run_id": "r", "command": "validate " + SECRETS["url"]})
    return run


@pytest.mark.parametrize("fmt", ["md", "rst", "html", "json", "junit"])
def test_every_format_renders_escaped_and_redacted(tmp_path: Path, fmt: str) -> None:
    run = _hostile_run(tmp_path)
    out = tmp_path / f"out.{fmt}"
    proc = cli("report", "--results", run.name, "--format", fmt, "--out", out.name, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # one failure: not signed off, rendered fine
    text = out.read_bytes().decode("utf-8")  # valid UTF-8 whatever the input held
    for control in ("\x1b", "\x07", "\x00", "\x0b"):
        assert control not in text
    assert "\\x1b" in text or "\\\\x1b" in text  # shown, escaped
    for secret in ("hunter2", SECRETS["gitlab"], SECRETS["github"], SECRETS["hf"], "abc123def"):
        assert secret not in text
    if fmt == "junit":
        ET.fromstring(out.read_bytes())  # still valid XML
    if fmt == "json":
        json.loads(text)
    assert "\x1b" not in proc.stderr  # and decodes: text mode would raise on a stray byte


def test_every_file_the_tool_wrote_is_redacted(tmp_path: Path) -> None:
    run = _hostile_run(tmp_path)
    for path in run.rglob("*"):
        if path.is_file() and path.name != "results.key":
            body = path.read_text(encoding="utf-8")
            for secret in SECRETS.values():
                value = secret.split("=", 1)[-1].split("//", 1)[-1].split("@")[0]
                assert value not in body, (path.name, secret)
            assert "plain-value-of-a-secret-name" not in body  # by name: HF_TOKEN


def test_terminal_gets_no_escape_sequence_from_a_case(tmp_path: Path) -> None:
    case = tmp_path / "noisy.py"
    case.write_text(
        "import sys\nprint('\\x1b]0;pwned\\x07\\x1b[2J', file=sys.stderr)\nsys.exit(1)\n"
    )
    proc = cli("run", case.name, "--results", "r", cwd=tmp_path)
    assert proc.returncode == 1
    assert "\x1b" not in proc.stdout + proc.stderr


def test_a_newline_in_a_case_name_keeps_its_progress_line_one_line(tmp_path: Path) -> None:
    """A file name may hold a newline: the case runs (forked, its argv intact) and its progress
    line stays one line, the newline shown as \\x0a."""
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "two\nlines.py").write_text("import sys\nprint(ascii(sys.argv[0]))\n")
    proc = cli("run", folder.name, "--results", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[1/1]")]
    assert len(lines) == 1, proc.stderr
    assert "PASS    two\\x0alines.py (" in lines[0], proc.stderr
    log = next((tmp_path / "r" / "cases").rglob("output.log")).read_text()
    assert "two\\nlines.py" in log  # ascii() of the script's own argv[0]


@pytest.mark.parametrize(
    ("text", "shown"),
    [("a\x1b[1mb", "a\\x1b[1mb"), ("ok\n\tnext", "ok\n\tnext"), (NOT_UTF8, "caf\\xe9")],
)
def test_display_escapes(text: str, shown: str) -> None:
    assert display(text) == shown


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_redact_by_value(name: str) -> None:
    assert "[redacted]" in redact(f"see {SECRETS[name]} here")
    assert SECRETS[name] not in redact(f"see {SECRETS[name]} here")


def test_redact_leaves_ordinary_text() -> None:
    text = "tokenizer: bert; content_key=80c99ed54bc5a445; monkey: banana; 9.24.0.43"
    assert redact(text) == text
