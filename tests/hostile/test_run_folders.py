"""Hostile input, as a user or a case would give it (issue 25, item 5): bad input files write
nothing, two runs started in the same second keep apart, secrets in the environment reach no file
of the run, and each result is durable before the tool reports it.

Through the real CLI in real processes (the installed `cudnn-matrix`); the default run folder is
`reports/runs/` under the working directory, so each test runs the tool in its own `tmp_path`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from usercli import cli, command, start

from validate.model.results import read_results

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "tests" / "resources"
SCRIPTS = RESOURCES / "scripts"
CELL = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0", "--arch", "sm90"]


def _env(**extra: str) -> dict[str, str]:
    """The test's environment and `extra`: the installed tool, the checkout nowhere on its path."""
    return {**os.environ, **extra}


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# --- 1. bad input writes nothing ---------------------------------------------------------------


def _bad_input(tmp_path: Path, which: str) -> tuple[list[str], str]:
    """argv that names one bad input file of kind `which`, and what the error must name."""
    bad = tmp_path / "bad.toml"
    match which:
        case "known-issues":  # a valid id, then a key the database does not know, on line 3
            bad.write_text('[[issue]]\nid = "KI-9"\nsymptomz = "x"\n', encoding="utf-8")
            return ["--known-issues", str(bad)], f"{bad}:3"
        case "matrix":
            bad.write_text("[axes\n", encoding="utf-8")  # not TOML
            return ["--matrix", str(bad)], f"{bad}:1"
        case "rules":
            bad.write_text("[[rule]]\nwhen = 3\n", encoding="utf-8")
            return ["--rules", str(bad)], str(bad)
        case "cases":
            folder = tmp_path / "cases"
            folder.mkdir()
            shutil.copy(SCRIPTS / "pass_script.py", folder / "pass_script.py")
            (folder / "cases.toml").write_text('[[case]]\nnope = "x"\n', encoding="utf-8")
            return ["--cases", str(folder)], str(folder / "cases.toml")
    raise AssertionError(which)


@pytest.mark.parametrize("which", ["known-issues", "matrix", "rules", "cases"])
@pytest.mark.parametrize("results", ["default", "given"])
def test_a_bad_input_file_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, which: str, results: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv, named = _bad_input(tmp_path, which)
    run = tmp_path / "run"
    given = ["--results", str(run)] if results == "given" else []
    done = cli("validate", *CELL, *argv, *given, cwd=work, env=_env())
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no run line, no slots line: only the error
    assert named in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert _files(work) == []  # no reports/runs/<id>/run.json
    assert _files(run) == []  # --results: nothing written into it


# --- 2. two runs in the same second --------------------------------------------------------


def test_two_runs_started_in_the_same_second_get_a_folder_each(tmp_path: Path) -> None:
    """Both without --results, in one working directory: each run has its own folder with only
    its own result. Before the fix the run id was the UTC second alone: both started together
    at the start of a second make their ids within it (unless the machine stalls them for most of
    a second), and they shared one folder."""
    cases = {}
    for name in ("first", "second"):
        cases[name] = tmp_path / f"{name}.py"
        shutil.copy(SCRIPTS / "pass_script.py", cases[name])
    argv = ["run", "--jobs", "1", "--no-api-logs"]
    # start both just after a second begins: each makes its id well within that second
    time.sleep(1 - time.time() % 1)
    procs = [
        start(
            *argv,
            case.name,
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in cases.values()
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    folders = sorted(p for p in (tmp_path / "reports" / "runs").iterdir())
    assert len(folders) == 2, folders
    stored = [
        sorted(r.case for r in read_results(folder / "results.jsonl").results) for folder in folders
    ]
    assert sorted(stored) == [["first.py"], ["second.py"]]
    for folder in folders:  # ids still sort by their start: the UTC second comes first
        assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", folder.name), folder.name


def test_a_run_folder_is_locked_while_its_run_is_open(tmp_path: Path) -> None:
    """A second run into a folder an open run holds (a `--resume` started while the first still
    writes) is bad input, one line, exit 2, and writes no result; a run killed with SIGKILL leaves
    no lock behind (the kernel drops it), so `--resume` works after a kill."""
    folder = tmp_path / "run"
    hold = (
        "import sys, time; from pathlib import Path; from validate.model.runs import open_run; "
        "run = open_run(Path(sys.argv[1])); print('open', flush=True); time.sleep(300)"
    )
    argv = ["run", "--jobs", "1", "--no-api-logs", "--results", str(folder)]
    with subprocess.Popen(
        [sys.executable, "-c", hold, str(folder)],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # the installed package, never the checkout's (`-c` puts cwd on the path)
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == "open\n"
            refused = cli(*argv, str(SCRIPTS / "pass_script.py"), cwd=tmp_path, env=_env())
            assert refused.returncode == 2, refused.stderr
            lines = refused.stderr.strip().splitlines()
            assert len(lines) == 1, refused.stderr
            assert "another run is writing into it" in lines[0]
            assert not (folder / "results.jsonl").exists()
        finally:
            holder.kill()  # SIGKILL: no close(), no cleanup of its own
    done = cli(*argv, "--resume", str(SCRIPTS / "pass_script.py"), cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert [r.case for r in read_results(folder / "results.jsonl").results] == ["pass_script.py"]


# --- 3. secrets in the captured environment ------------------------------------------------

_SECRETS = {
    "NVIDIA_NGC_PASSWD": "ngc-passwd-4f1c9e",  # kept by its NVIDIA prefix, secret by its name
    "CUDNN_MATRIX_TEST_AUTH": "auth-value-77ab12",
    "CUDA_REPO_URL": "https://mirror-user:url-passwd-93d2aa@repo.example.com/cuda/",
}
_SECRET_TEXT = ("ngc-passwd-4f1c9e", "auth-value-77ab12", "url-passwd-93d2aa", "mirror-user")


@pytest.mark.parametrize(
    ("case", "fork"),
    [
        ("scripts/pass_script.py", "1"),
        ("scripts/pass_script.py", "0"),
        ("notebooks/pass.ipynb", "1"),
    ],
    ids=["script-forked", "script-spawned", "notebook"],
)
def test_secret_environment_values_reach_no_file_of_the_run(
    tmp_path: Path, case: str, fork: str
) -> None:
    run = tmp_path / "run"
    env = {**_SECRETS, "CUDNN_MATRIX_FORK_SERVER": fork}
    done = cli(
        "run", str(RESOURCES / case), "--results", str(run), "--json", cwd=tmp_path, env=_env(**env)
    )
    assert done.returncode == 0, done.stderr
    (result,) = read_results(run / "results.jsonl").results
    assert result.env["env"]["CUDA_REPO_URL"].endswith("@repo.example.com/cuda/")  # captured
    assert "NVIDIA_NGC_PASSWD" in result.env["env"]
    files = _files(run)
    assert any(p.name == "report.json" for p in files)
    assert any(p.name == "result.json" for p in files)
    for path in files:
        data = path.read_bytes()
        for secret in _SECRET_TEXT:
            assert secret.encode() not in data, f"{secret} in {path}"
    for secret in _SECRET_TEXT:
        assert secret not in done.stdout + done.stderr


# --- 4. each result durable before it is reported ------------------------------------------

#: `strace -f -y` lines: `TID call(FD<path>, "data"..., n) = r`, split when a call is interrupted
#: (`... <unfinished ...>`, then `TID <... call resumed>...`).
_CALL = re.compile(
    r'^(?P<tid>\d+)\s+(?P<call>write|fsync|fdatasync)\(\d+<(?P<path>[^>]*)>(?:, "(?P<data>[^"]*))?'
)
_RESUMED = re.compile(r"^(?P<tid>\d+)\s+<\.\.\. (?P<call>\w+) resumed>")
_PROGRESS = re.compile(r"\[(?P<n>\d+)/5\]")


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed (.ci/run has it)")
def test_each_result_is_durable_before_it_is_reported(tmp_path: Path) -> None:
    """Five cases on two slots under strace. When the tool starts to print a case's `[n/5]` line,
    n results lines were each written and then fsynced by the thread that wrote them, the run
    folder was fsynced after results.jsonl appeared in it (an fsynced file whose name a power cut
    takes is lost all the same), and the run key that signs the lines was fsynced (a line that no
    longer verifies is not counted)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    for i in range(5):
        shutil.copy(SCRIPTS / "pass_script.py", cases / f"case{i}.py")
    run, log, state = tmp_path / "run", tmp_path / "strace.log", tmp_path / "state"
    tool = command("run", "cases", "--jobs", "2", "--no-api-logs", "--results", "run")
    done = subprocess.run(
        [
            *("strace", "-f", "-y", "-qq", "-s", "32", "-o", str(log)),
            *("-e", "trace=write,fsync,fdatasync"),
            *tool,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=_env(CUDNN_MATRIX_STATE_DIR=str(state)),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results, folder, keys = str(run / "results.jsonl"), str(run), str(state)
    unsynced: dict[str, int] = {}  # thread -> results lines it wrote and has not fsynced yet
    durable, folder_synced, key_written, key_synced = 0, False, False, False
    reported: list[int] = []
    pending: dict[str, tuple[str, str]] = {}

    def completed(tid: str, call: str, path: str) -> None:
        nonlocal durable, folder_synced, key_written, key_synced
        syncs = call in ("fsync", "fdatasync")
        if path == results:
            if syncs:
                durable += unsynced.pop(tid, 0)
            else:
                unsynced[tid] = unsynced.get(tid, 0) + 1
        elif path == folder and syncs:
            folder_synced = durable > 0 or bool(unsynced)  # after the file was made
        elif path.startswith(keys + "/"):  # the private key file (or its temp file)
            key_written = key_written or not syncs
            key_synced = key_synced or (syncs and key_written)

    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        resumed = _RESUMED.match(line)
        if resumed:
            if resumed["tid"] in pending:
                completed(resumed["tid"], *pending.pop(resumed["tid"]))
            continue
        found = _CALL.match(line)
        if found is None:
            continue
        progress = _PROGRESS.search(found["data"] or "")
        if found["call"] == "write" and found["path"].startswith("pipe:") and progress:
            n = int(progress["n"])  # the line starts being printed now
            reported.append(n)
            assert durable >= n, f"[{n}/5] printed with {durable} results lines fsynced"
            assert folder_synced, f"[{n}/5] printed before the run folder was fsynced"
            assert key_synced, f"[{n}/5] printed before the run key was fsynced"
        if line.endswith("<unfinished ...>"):
            pending[found["tid"]] = (found["call"], found["path"])
        else:
            completed(found["tid"], found["call"], found["path"])
    assert sorted(reported) == [1, 2, 3, 4, 5], done.stderr
    assert durable == 5
