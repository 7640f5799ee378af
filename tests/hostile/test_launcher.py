"""The launcher (execute/launch.py) against hostile pytest suites, run as a user runs them
(`run --tests SUITE --jobs 2 --timeout T --results DIR`): a daemon a test leaves, a 300 MB flood,
a collection that hangs, a test that kills the tool. Real processes, found by a tag in their
environment that only this test's run carries; the elapsed-time bounds only tell a hang from an
end, they time nothing."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from proctags import default_sigint, kill_tagged, tagged, tagged_env
from resultlines import whole_result_lines
from usercli import cli, command, start

if TYPE_CHECKING:
    from collections.abc import Iterator

SUITES = Path(__file__).resolve().parents[1] / "resources" / "hostile" / "suites"
PROCS = Path(__file__).resolve().parents[1] / "resources" / "hostile" / "procs"


@pytest.fixture
def tag() -> Iterator[tuple[str, dict[str, str]]]:
    found = tagged_env()
    yield found
    kill_tagged(found[0])


def _run(
    suite: str, run_dir: Path, env: dict[str, str], *flags: str, wall_s: float = 240
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The tool over one hostile suite, started in the run folder's parent; returns it and its
    elapsed seconds."""
    args = ["run", "--tests", str(SUITES / suite), "--jobs", "2", "--results", run_dir.name]
    began = time.monotonic()
    proc = cli(*args, "--no-api-logs", *flags, cwd=run_dir.parent, env=env, timeout=wall_s)
    return proc, time.monotonic() - began


def _outcomes(run_dir: Path) -> dict[str, str]:
    return {r["case"]: r["outcome"] for r in whole_result_lines(run_dir)}


def _gone(tag: str, marker: str = "") -> list[str]:
    """What is left carrying `tag` a few seconds on (a SIGKILLed process takes a moment)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and tagged(tag, marker):
        time.sleep(0.1)
    return tagged(tag, marker)


def test_a_daemon_a_test_leaves_is_ended_with_its_process(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """Double fork + setsid: the grandchild left the test's group and session, and still ends
    with its pytest process (found by the case token), named (pid, command line) in the note of
    the test that started it."""
    name, env = tag
    run_dir = tmp_path / "run"
    proc, _ = _run("daemon", run_dir, env, "--timeout", "60")
    assert _outcomes(run_dir) == {
        "test_daemon.py::test_daemonizes": "pass",
        "test_daemon.py::test_after": "pass",
    }, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert _gone(name, "hostile_daemon") == [], proc.stderr
    rows = whole_result_lines(run_dir)
    last = {r["case"]: r.get("reason", "") for r in rows}  # the later line is read
    note = last["test_daemon.py::test_daemonizes"]
    assert "1 process(es) outlived the test and were killed: " in note, note
    assert note.endswith("time.sleep(600) hostile_daemon"), note
    assert last["test_daemon.py::test_after"] == ""


def test_a_script_cases_leftovers_are_named_in_its_note(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """Script cases (forked by the fork server, and fresh): a background child and a
    double-forked daemon are ended with the case and named (pid, command line) in its note."""
    name, env = tag
    cases = tmp_path / "cases"
    cases.mkdir()
    for script in ("background_child.py", "double_fork.py"):
        shutil.copy(PROCS / script, cases / script)
    for fork in ("1", "0"):
        run_dir = tmp_path / f"run-{fork}"
        args = ["run", "cases", "--jobs", "2", "--timeout", "60", "--results", run_dir.name]
        proc = cli(
            *args,
            "--no-api-logs",
            cwd=tmp_path,
            env={**env, "CUDNN_MATRIX_FORK_SERVER": fork},
            timeout=240,
        )
        got = {r["case"]: (r["outcome"], r.get("reason", "")) for r in whole_result_lines(run_dir)}
        assert set(got) == {"background_child.py", "double_fork.py"}, proc.stderr
        outcome, note = got["background_child.py"]
        assert outcome == "pass"
        assert "1 process(es) outlived the case and were killed: " in note, note
        assert note.endswith("time.sleep(600) background_child"), note
        outcome, note = got["double_fork.py"]
        assert outcome == "pass"
        assert "1 process(es) outlived the case and were killed: " in note, note
        assert "double_fork.py" in note, note  # a fork, not an exec: the script's command line
        assert _gone(name) == []


def _disk(folder: Path) -> tuple[int, int]:
    """(apparent bytes, bytes on disk) of every file under `folder`."""
    files = [p.stat() for p in folder.rglob("*") if p.is_file()]
    return sum(s.st_size for s in files), sum(s.st_blocks * 512 for s in files)


def test_a_300_mb_flood_keeps_at_most_the_cap(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """300 MB to stdout: the run folder keeps the first and last MiB of that process's output
    (the default --capture-cap, 2 MiB), one line naming the full size between them; the test
    still passes."""
    _, env = tag
    run_dir = tmp_path / "run"
    proc, _ = _run("flood", run_dir, env, "--timeout", "120")
    assert _outcomes(run_dir) == {
        "test_flood.py::test_floods": "pass",
        "test_flood.py::test_after": "pass",
    }, proc.stderr
    size, on_disk = _disk(run_dir)
    assert size < 6 * 1024 * 1024, sorted(
        (p.stat().st_size, str(p)) for p in run_dir.rglob("*") if p.is_file()
    )
    assert on_disk < 6 * 1024 * 1024
    logs = [p.read_bytes() for p in run_dir.rglob("output.*.log")]
    cut = [log for log in logs if b"bytes left out here" in log]
    assert len(cut) == 1, [len(log) for log in logs]
    line = next(ln for ln in cut[0].splitlines() if b"bytes left out here" in ln)
    full = int(line.split(b"the process wrote ")[1].split(b" bytes")[0].replace(b",", b""))
    assert full >= 300 * 1024 * 1024  # the full size is recorded
    assert cut[0].endswith(b"\n")  # its tail is kept: the last of the flood, pytest's summary


def test_a_collection_that_hangs_ends_at_its_limit(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """`pytest_collection_modifyitems` sleeps 10 min: with --timeout 2 and
    --tests-startup-timeout 5 the start-up limit is 5 s (without the flag: max(3 x 2 s, 60 s),
    tests/unit/test_limits.py); the suite is one `error` saying so, and nothing is left
    running."""
    name, env = tag
    run_dir = tmp_path / "run"
    flags = ("--timeout", "2", "--tests-startup-timeout", "5")
    proc, took = _run("hang_collect", run_dir, env, *flags, wall_s=200)
    assert took < 120  # a hang would run to 600 s (it was 900 s of start-up before)
    rows = whole_result_lines(run_dir)
    assert [(r["case"], r["outcome"]) for r in rows] == [("pytest:hang_collect", "error")], rows
    assert "killed after 5s without collecting" in rows[0]["reason"], rows[0]
    assert proc.returncode == 1, proc.stderr
    assert _gone(name) == []


def test_a_test_that_kills_the_tool_is_its_crash_after_two_resumes(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """The test SIGKILLs the tool and the tool's parent (a shell of its own here). The first
    `--resume` runs it once more alone, and it kills the tool again; the second stores it as
    `crash` ("the tool was killed while it ran") and completes the run: each id once. The
    daemon a test before it left outlives the tool, and `--resume` ends it."""
    name, env = tag
    run_dir = tmp_path / "run"
    tool = ["run", "--tests", str(SUITES / "kills_tool"), "--jobs", "2", "--timeout", "60"]
    tool += ["--results", "run", "--no-api-logs"]
    codes = []
    for attempt in range(3):  # the run, then at most two --resume
        argv = [*tool, "--resume"] if attempt else tool
        # a shell of its own around the tool: the grandparent the test may kill
        script = f"HOSTILE_GRANDPARENT_PID=$$ {shlex.join(command(*argv))}; echo tool-exit=$?"
        shell = subprocess.run(
            ["sh", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=240,
        )
        codes.append(shell.returncode)
        assert _gone(name, "run_pytest") == []  # its pytest processes died with the tool
        if "tool-exit=" in shell.stdout:
            break
        if attempt == 0:  # the daemon a test left outlived the tool; --resume ends it
            assert tagged(name, "hostile_daemon") != []
    assert codes[:2] == [-9, -9], codes  # the test killed the tool and its shell twice
    assert "tool-exit=1" in shell.stdout, (codes, shell.stdout, shell.stderr)
    rows = whole_result_lines(run_dir)
    counts = Counter(r["case"] for r in rows)
    for case in (k for k, n in counts.items() if n > 1):  # a verdict, then its note (leftovers)
        first, *_, last = (r for r in rows if r["case"] == case)
        assert first["outcome"] == last["outcome"], (first, last)
        assert "outlived the test" in last["reason"], last
        assert counts[case] == 2, case
    got = {r["case"]: r for r in rows}
    assert got["test_kills_tool.py::test_kills_the_tool"]["outcome"] == "crash"
    assert (
        "the tool was killed while it ran"
        in got["test_kills_tool.py::test_kills_the_tool"]["reason"]
    )
    others = {k: r["outcome"] for k, r in got.items() if "kills_the_tool" not in k}
    assert _gone(name, "hostile_daemon") == []
    assert others == {
        "test_kills_tool.py::test_leaves_a_daemon": "pass",
        **{f"test_a_before.py::test_before[{n}]": "pass" for n in range(5)},
        **{f"test_z_after.py::test_after[{n}]": "pass" for n in range(7)},
    }


#: A case that writes what it runs on beside itself: its CPUs, its GPUs, whether it has a token.
PLACE_PROBE = """\
import json, os, pathlib
pathlib.Path(__file__).with_suffix(".json").write_text(json.dumps({
    "cpus": sorted(os.sched_getaffinity(0)),
    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "token": bool(os.environ.get("CUDNN_MATRIX_CASE_TOKEN")),
}))
"""


@pytest.mark.parametrize("forked", [True, False], ids=["fork-server", "fresh"])
def test_a_jobs_placement_reaches_its_case_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: bool
) -> None:
    """A pool job's placement (the ledger's choice) is applied by the launcher to the process
    the job starts, forked by a server or fresh: CUDA_VISIBLE_DEVICES and the CPU affinity."""
    from validate.env.target import ExecTarget
    from validate.execute.attempt import RunOptions, run_attempt
    from validate.execute.cases import discover_cases
    from validate.execute.forkserver import OFF_ENV
    from validate.execute.placement import Placement
    from validate.execute.pool import Job, Pool
    from validate.execute.runner import run_pool

    if not forked:
        monkeypatch.setenv(OFF_ENV, "0")
    script = tmp_path / "probe.py"
    script.write_text(PLACE_PROBE)
    (case,) = discover_cases([script])
    options = RunOptions(results_dir=tmp_path / "run", timeout_s=60, api_logs=False)
    cpu = min(os.sched_getaffinity(0))
    where = Placement(gpus=(3,), cpus=frozenset({cpu}))
    folder = tmp_path / "run" / "case"
    folder.mkdir(parents=True)
    target = ExecTarget(python=Path(sys.executable))

    def run() -> tuple[Job, ...]:
        result, _ = run_attempt(case, target, options, folder, 1, api_logs=False)
        assert result.returncode == 0, result.tail
        return ()

    pool = Pool(1)
    pool.submit([Job(name="probe", run=run, placement=where)])
    pool.close()
    run_pool(pool)
    seen = json.loads(script.with_suffix(".json").read_text())
    assert seen == {"cpus": [cpu], "gpus": "3", "token": True}


def test_a_batch_runs_on_its_placement(tmp_path: Path) -> None:
    """A pytest batch's process (a share's, through execute/batches.py) on its placement."""
    from validate.execute.batches import BatchRun
    from validate.execute.collection import Suite
    from validate.execute.placement import Placement

    root = tmp_path / "suite"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_where.py").write_text(
        "import json, os, pathlib\n"
        "def test_where():\n"
        "    pathlib.Path(__file__).with_suffix('.json').write_text(json.dumps(\n"
        "        [sorted(os.sched_getaffinity(0)), os.environ.get('CUDA_VISIBLE_DEVICES')]))\n"
    )
    cpu = min(os.sched_getaffinity(0))
    ends: list[Any] = []
    BatchRun(
        ids=["test_where.py::test_where"],
        argv=Suite.from_flags(root, None).argv(Path(sys.executable)),
        env=dict(os.environ),
        cwd=root,
        folder=tmp_path / "batch",
        limit_s=lambda _id: 60.0,
        on_ends=ends.extend,
        placement=Placement(gpus=(1, 2), cpus=frozenset({cpu})),
    ).run()
    assert [(e.id, str(e.outcome)) for e in ends] == [("test_where.py::test_where", "pass")]
    assert json.loads((root / "test_where.json").read_text()) == [[cpu], "1,2"]


def test_an_interrupted_test_is_no_suspect_on_resume(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """Ctrl-C of the tool while a test runs is not the tool's death: its batch is marked
    abandoned, and `--resume` runs that test with the rest, not alone as a suspect."""
    name, env = tag
    run_dir = tmp_path / "run"
    argv = ["run", "--tests", str(SUITES / "sleeper"), "--jobs", "1", "--results", "run"]
    tool = start(
        *argv,
        "--no-api-logs",
        "--timeout",
        "120",
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 120
    started = b'"id": "test_sleep.py::test_sleeps"'
    records: list[Path] = []
    while time.monotonic() < deadline:
        records = list(run_dir.glob("cases/local/pytest/share-*/record.*.jsonl"))
        if any(started in r.read_bytes() for r in records):
            break
        time.sleep(0.1)
    tool.send_signal(signal.SIGINT)
    assert tool.wait(timeout=60) == 130
    record = next(r for r in records if started in r.read_bytes())
    assert json.loads(record.read_text().splitlines()[-1]) == {"ev": "abandon"}
    assert _gone(name, "run_pytest") == []
    proc, _ = _run("sleeper", run_dir, env, "--timeout", "2", "--resume")
    assert "when the tool was killed" not in proc.stderr, proc.stderr
    assert not list(run_dir.glob("cases/local/pytest/alone-*")), proc.stderr
    assert _outcomes(run_dir) == {
        "test_sleep.py::test_quick": "pass",
        "test_sleep.py::test_sleeps": "timeout",
    }, proc.stderr
