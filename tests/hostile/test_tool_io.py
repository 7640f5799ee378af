"""The tool's own I/O: an output path that is a file, under /proc or read-only is one line, exit 2,
before anything runs. A disk that fills up or a results folder deleted mid-run stops the run with
one line (exit 5) and keeps every finished result; a case file with a name that is not UTF-8, or one
that another case deleted, gets its own verdict and the run goes on."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from usercli import cli, command

from validate.errors import ResultsLost
from validate.model.outcome import Outcome
from validate.model.results import (
    RESERVE_BYTES,
    CaseResult,
    ResultStore,
    RunKey,
    read_results,
)

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"
EXAMPLE = Path(__file__).resolve().parents[1] / "resources" / "runs" / "example"
IO = Path(__file__).resolve().parents[1] / "resources" / "hostile" / "io"
PASS = SCRIPTS / "pass_script.py"


def _bad_places(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder\n")
    places = {"file": a_file, "proc": Path("/proc/self/cudnn-matrix"), "sys": Path("/sys/kernel")}
    if os.geteuid() != 0:  # root writes through permission bits; /sys stands in for read-only
        read_only = tmp_path / "ro"
        read_only.mkdir(mode=0o555)
        places["read_only"] = read_only
    return places


COMMANDS = {
    "run --results": ("run", str(SCRIPTS / "pass_script.py"), "--results", "{}"),
    "validate --results": ("validate", "--cudnn", "9.24.0.43", "--results", "{}"),
    "report --out": ("report", "--results", str(EXAMPLE), "--out", "{}/compat.md"),
    "report --bug-reports": ("report", "--results", str(EXAMPLE), "--bug-reports", "{}"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("place", ["file", "proc", "sys", "read_only"])
def test_unusable_output_path_is_one_line_before_anything_runs(
    tmp_path: Path, command: str, place: str
) -> None:
    places = _bad_places(tmp_path)
    if place not in places:
        pytest.skip("running as root: permission bits do not stop root (the /sys case covers it)")
    target = places[place]
    argv = [a.replace("{}", str(target)) for a in COMMANDS[command]]
    proc = cli(
        *argv,
        cwd=tmp_path,
        env={**os.environ, "CUDNN_MATRIX_CACHE": str(tmp_path / "cache")},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    flag = command.split()[1]
    assert flag in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "reports").exists()  # no default run folder: nothing ran
    assert not (tmp_path / "cache").exists()  # no environment was built


def _cases(folder: Path, named: dict[str, Path]) -> Path:
    folder.mkdir()
    for name, source in named.items():
        shutil.copy(source, folder / name)
    return folder


def _tool(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli(*map(str, argv), cwd=cwd, timeout=240)


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("cudnn-matrix:")]


def _outcomes(file: Path, key: RunKey | None = None) -> dict[str, tuple[str, str]]:
    read = read_results(file, key)
    assert read.skipped == []  # no torn, half-written or unsigned line
    return {r.case: (str(r.outcome), r.reason) for r in read.results}


# --- disk full: a real 2 MiB tmpfs in a user + mount namespace of the test's own -----------------

#: Mounts a 2 MiB tmpfs on $MNT, runs "$@", then copies what is on it to $KEPT (the tmpfs ends
#: with the namespace). Exit 99: the mount itself was refused.
_ON_TMPFS = (
    'mount -t tmpfs -o size=2m tmpfs "$MNT" || exit 99; "$@"; rc=$?; '
    'mkdir -p "$KEPT" && cp -a "$MNT/." "$KEPT/"; exit $rc'
)
_UNSHARE = ("unshare", "--user", "--map-root-user", "--mount")


@functools.cache
def _no_tmpfs_namespace() -> str | None:
    """Why a private tmpfs cannot be mounted here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        [*_UNSHARE, "sh", "-c", "mount -t tmpfs -o size=2m tmpfs /mnt"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"unshare --user --mount with a tmpfs is refused here: {probe.stderr.strip()}"
    return None


def _on_small_tmpfs(
    tmp_path: Path, *argv: str | Path
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """Run argv ("{mnt}" in it is the tmpfs) with a full-size-2-MiB file system; returns the
    process, the mount point (paths as the tool saw them) and the copy of what was left on it."""
    why = _no_tmpfs_namespace()
    if why is not None:
        if os.environ.get("CUDNN_MATRIX_REQUIRE_UNSHARE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    mnt, kept = tmp_path / "mnt", tmp_path / "kept"
    mnt.mkdir()
    args = [str(a).replace("{mnt}", str(mnt)) for a in argv]
    proc = subprocess.run(
        [*_UNSHARE, "sh", "-c", _ON_TMPFS, "sh", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MNT": str(mnt), "KEPT": str(kept)},
        timeout=240,
    )
    assert proc.returncode != 99, proc.stderr
    return proc, mnt, kept


def test_disk_full_stops_the_run_and_keeps_every_finished_result(tmp_path: Path) -> None:
    cases = _cases(
        tmp_path / "cases",
        {"a_before.py": PASS, "b_fills_disk.py": IO / "fills_disk.py", "c_after.py": PASS},
    )
    argv = ("run", cases, "--jobs", "1", "--no-api-logs", "--results", "{mnt}/run")
    proc, mnt, kept = _on_small_tmpfs(tmp_path, *command(*map(str, argv)))
    assert proc.returncode == 5, proc.stderr
    [line] = _error_lines(proc.stderr)
    assert "disk full" in line
    assert "no new case started" in line
    outcomes = _outcomes(kept / "run" / "results.jsonl", RunKey.for_run(mnt / "run"))
    assert sorted(outcomes) == ["a_before.py", "b_fills_disk.py"]  # c_after never started
    assert outcomes["a_before.py"][0] == "pass"
    # the case that ended while the disk was full is the harness's `error`, not its own "pass"
    # nor a product `fail` caused by a write that failed
    outcome, reason = outcomes["b_fills_disk.py"]
    assert outcome == "error"
    assert reason.startswith("while it ran: disk full")


_FULL_DISK_STORE = """
import os, sys
from pathlib import Path
from validate.errors import ResultsLost
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore
mnt = Path(sys.argv[1])
store = ResultStore(mnt / "run" / "results.jsonl")
store.append(CaseResult(case="before.py", outcome=Outcome.PASS))
fd = os.open(mnt / "fill", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, bytes(4096))
except OSError as exc:
    print("filled:", exc.strerror)
os.ftruncate(fd, os.fstat(fd).st_size - 4096)  # one page left: the next line fits only in part
store.append(CaseResult(case="ended_on_a_full_disk.py", outcome=Outcome.FAIL, tail="x" * 8192))
try:
    store.check()
except ResultsLost as exc:
    print("lost:", exc)
"""


def test_a_full_disk_still_takes_the_last_results_from_the_reserve(tmp_path: Path) -> None:
    proc, mnt, kept = _on_small_tmpfs(tmp_path, sys.executable, "-c", _FULL_DISK_STORE, "{mnt}")
    assert proc.returncode == 0, proc.stderr
    assert "filled: No space left on device" in proc.stdout
    assert "lost: disk full" in proc.stdout  # the run stops after the line that used the reserve
    # the part of the line that fit was cut back off before the reserve took all of it
    outcomes = _outcomes(kept / "run" / "results.jsonl", RunKey.for_run(mnt / "run"))
    assert sorted(outcomes) == ["before.py", "ended_on_a_full_disk.py"]


# --- the results folder or file deleted mid-run -------------------------------------------------


def test_results_folder_deleted_mid_run_is_recreated_and_the_run_stops(tmp_path: Path) -> None:
    named = {"a_before.py": PASS, "b_deletes_run.py": IO / "deletes_run_folder.py"}
    cases = _cases(tmp_path / "cases", {**named, "c_after.py": PASS})
    run = tmp_path / "run"
    argv = ("run", cases, "--jobs", "1", "--no-api-logs", "--results", run)
    proc = _tool(*argv, cwd=tmp_path)
    assert proc.returncode == 5, proc.stderr
    [line] = _error_lines(proc.stderr)
    assert f"results folder {run} was deleted" in line
    outcomes = _outcomes(run / "results.jsonl")
    assert sorted(outcomes) == ["a_before.py", "b_deletes_run.py"]  # finished ones written back
    assert outcomes["a_before.py"][0] == "pass"
    assert outcomes["b_deletes_run.py"][0] == "error"  # its evidence went with the folder
    resumed = _tool(*argv, "--resume", cwd=tmp_path)
    assert _error_lines(resumed.stderr) == []
    assert _outcomes(run / "results.jsonl")["c_after.py"][0] == "pass"  # --resume completes it


def _store_with_two(tmp_path: Path) -> ResultStore:
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    store.append(CaseResult(case="a.py", outcome=Outcome.PASS))
    store.append(CaseResult(case="b.py", outcome=Outcome.FAIL))
    store.check()  # nothing wrong yet
    return store


def test_a_replaced_results_file_is_written_back_and_stops_the_run(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    forged = store.path.with_name("forged")
    forged.write_text('{"case": "b.py", "outcome": "pass"}\n')
    forged.replace(store.path)  # a case swaps the file for its own
    with pytest.raises(ResultsLost, match=r"results\.jsonl was deleted or replaced mid-run"):
        store.check()
    assert _outcomes(store.path, store.key) == {"a.py": ("pass", ""), "b.py": ("fail", "")}


def test_a_folder_that_cannot_be_recreated_is_named(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    shutil.rmtree(store.path.parent)
    store.path.parent.write_text("a file where the run folder was\n")
    with pytest.raises(ResultsLost, match=r"was deleted or replaced mid-run, and re-creating"):
        store.append(CaseResult(case="c.py", outcome=Outcome.PASS))


def test_the_reserve_holds_real_blocks_until_the_run_is_sealed(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    [reserve] = store.path.parent.glob(".*reserve")
    assert reserve.stat().st_blocks * 512 >= RESERVE_BYTES  # allocated, not a sparse file
    store.seal()
    assert not reserve.exists()
    assert (store.path.parent / "results.key").is_file()


# --- hostile case files -------------------------------------------------------------------------


def test_undecodable_names_and_deleted_case_files_get_their_own_verdicts(tmp_path: Path) -> None:
    odd = os.fsdecode(b"b_\xff\xfe_name.py")  # not valid UTF-8: a surrogate-escaped str
    named = {"a_deletes_others.py": IO / "deletes_other_cases.py", odd: PASS}
    cases = _cases(tmp_path / "cases", {**named, "victim_1.py": PASS, "victim_2.py": PASS})
    shutil.copy(PASS, cases / "z_after.py")
    run = tmp_path / "run"
    proc = _tool("run", cases, "--jobs", "1", "--no-api-logs", "--results", run, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the victims' `error` blocks the sign-off
    assert _error_lines(proc.stderr) == []
    vanished = ("error", "case file vanished before it ran")
    assert _outcomes(run / "results.jsonl") == {
        "a_deletes_others.py": ("pass", ""),
        odd: ("pass", ""),
        "victim_1.py": vanished,
        "victim_2.py": vanished,
        "z_after.py": ("pass", ""),  # the run went on
    }
    assert "PASS    b_\\xff\\xfe_name.py" in proc.stderr  # its progress line, escaped
    report = _tool("report", "--results", run, "--format", "junit", cwd=tmp_path)
    assert report.returncode == 1, report.stderr
    assert _error_lines(report.stderr) == []
    names = {case.get("name") for case in ET.fromstring(report.stdout).iter("testcase")}
    assert "b_\\xff\\xfe_name.py" in names  # escaped, not mangled or dropped
