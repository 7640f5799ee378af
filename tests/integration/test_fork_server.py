"""Script cases forked from a warm interpreter (execute/forkserver.py): each is still a process
and a session of its own, with its own environment, command line and exit; a server that dies is
never a case's verdict."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.forkserver import OFF_ENV
from validate.execute.pool import Pool
from validate.execute.runner import CaseBatch, RunOptions, run_cases, run_pool
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore

if TYPE_CHECKING:
    import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "resources" / "kernel" / "transport.ipynb"
#: The case writes what it sees of itself to the file named by its first line's folder.
PROBE = """\
import json, os, pathlib, sys
here = pathlib.Path(__file__)
supervisor = os.getppid()  # resources/guard.py become_reaper: the case's own supervisor
with open(f"/proc/{supervisor}/stat", "rb") as fh:
    server = int(fh.read().rsplit(b")", 1)[1].split()[1])
cmdline = pathlib.Path("/proc/self/cmdline").read_bytes().rstrip(b"\\0").split(b"\\0")
here.with_suffix(".json").write_text(json.dumps({
    "pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0), "server": server,
    "supervisor": supervisor,
    "cmdline": [a.decode() for a in cmdline], "argv": sys.argv,
    "result_file": os.environ.get("CUDNN_MATRIX_RESULT_FILE"),
    "marker": os.environ.get("PROBE_MARKER"), "stdin": sys.stdin.read(),
}))
"""


def _run(tmp_path: Path, scripts: list[Path], target: ExecTarget, run: str) -> list[CaseResult]:
    options = RunOptions(results_dir=tmp_path / run, jobs=2, timeout_s=60, api_logs=False)
    store = ResultStore(tmp_path / run / "results.jsonl")
    return run_cases(discover_cases(scripts), target, options, store)


def test_each_forked_case_is_its_own_process_session_and_command_line(tmp_path: Path) -> None:
    scripts = []
    for name in ("probe_a.py", "probe_b.py", "probe_c.py"):
        (tmp_path / name).write_text(PROBE)
        scripts.append(tmp_path / name)
    results = _run(tmp_path, scripts, ExecTarget(python=Path(sys.executable)), "run")
    assert [r.outcome for r in results] == [Outcome.PASS] * 3, [r.reason for r in results]
    seen = [json.loads((tmp_path / f"probe_{x}.json").read_text()) for x in "abc"]
    assert len({s["pid"] for s in seen}) == 3
    for probe, script in zip(seen, scripts, strict=True):
        # a session and group of its own, led by its supervisor (the timeout kills that group)
        assert probe["sid"] == probe["pgid"] == probe["supervisor"]
        assert probe["sid"] != os.getsid(0)  # not the tool's session: Ctrl-C never reaches it
        assert probe["argv"] == [str(script)]
        # ps shows what a fresh start would: python run_script.py SCRIPT REPORT
        assert probe["cmdline"][0] == sys.executable
        assert probe["cmdline"][1].endswith("run_script.py")
        assert probe["cmdline"][2] == str(script)
        assert probe["stdin"] == ""
        assert probe["result_file"].endswith("script-result.json")
    assert len({s["result_file"] for s in seen}) == 3  # each case its own per-case variables
    # one server for the three cases: they share its interpreter, not a process
    assert len({s["server"] for s in seen}) == 1
    assert seen[0]["server"] != os.getpid()


def test_another_environment_gets_another_server(tmp_path: Path) -> None:
    """What the loader and Python read at start (here one more variable) is the server's own:
    a target with another environment is forked from a server of its own."""
    (tmp_path / "probe_a.py").write_text(PROBE)
    (tmp_path / "probe_b.py").write_text(PROBE)
    target_a = ExecTarget(python=Path(sys.executable), env={"PROBE_MARKER": "a"})
    target_b = ExecTarget(python=Path(sys.executable), env={"PROBE_MARKER": "b"})
    assert _run(tmp_path, [tmp_path / "probe_a.py"], target_a, "a")[0].outcome == Outcome.PASS
    assert _run(tmp_path, [tmp_path / "probe_b.py"], target_b, "b")[0].outcome == Outcome.PASS
    a = json.loads((tmp_path / "probe_a.json").read_text())
    b = json.loads((tmp_path / "probe_b.json").read_text())
    assert (a["marker"], b["marker"]) == ("a", "b")
    assert a["server"] != b["server"]


def test_a_case_that_kills_its_server_runs_again_fresh(tmp_path: Path) -> None:
    """The server dies under a running case (here the case kills it): that is no verdict on the
    case, which runs again as a fresh process and passes."""
    marker = tmp_path / "killed-once"
    (tmp_path / "kills_server.py").write_text(
        "import os, pathlib, signal, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.write_text('')\n"
        "    with open(f'/proc/{os.getppid()}/stat', 'rb') as fh:\n"
        "        server = int(fh.read().rsplit(b')', 1)[1].split()[1])\n"
        "    os.kill(server, signal.SIGKILL)\n"
        "    time.sleep(30)\n"
        "print('second run')\n"
    )
    (tmp_path / "after.py").write_text("print('after')\n")
    scripts = [tmp_path / "kills_server.py", tmp_path / "after.py"]
    results = _run(tmp_path, scripts, ExecTarget(python=Path(sys.executable)), "run")
    by_case = {r.case: r for r in results}
    assert by_case["kills_server.py"].outcome == Outcome.PASS, by_case["kills_server.py"].reason
    assert by_case["kills_server.py"].duration_s < 30  # the first run did not sleep it out
    assert "second run" in Path(by_case["kills_server.py"].log_path).read_text()
    assert by_case["after.py"].outcome == Outcome.PASS


def test_exit_steps_run_for_stdlib_and_full_finalization_for_the_rest(tmp_path: Path) -> None:
    """A stdlib-only case still joins its threads, runs atexit handlers and flushes its output
    (resources/fork_server.py _exit); a case that loaded anything else is finalized in full
    (here: a module-level object's __del__ runs at exit, as after `python SCRIPT`)."""
    (tmp_path / "stdlib_only.py").write_text(
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
        "sys.stdout.write('unflushed')\n"
        "sys.exit(4)\n"
    )
    (tmp_path / "helper_mod.py").write_text(
        "class Bye:\n    def __del__(self):\n        print('teardown ran', flush=True)\n"
    )
    (tmp_path / "with_module.py").write_text("import helper_mod\nkeep = helper_mod.Bye()\n")
    scripts = [tmp_path / "stdlib_only.py", tmp_path / "with_module.py"]
    results = {
        r.case: r for r in _run(tmp_path, scripts, ExecTarget(python=Path(sys.executable)), "run")
    }
    stdlib = results["stdlib_only.py"]
    assert stdlib.exit_code == 4, stdlib
    out = Path(stdlib.log_path).read_text()
    assert "thread done" in out
    assert "atexit ran" in out
    assert "unflushed" in out
    assert out.index("thread done") < out.index("atexit ran")  # the interpreter's order
    full = results["with_module.py"]
    assert full.outcome == Outcome.PASS, full.reason
    assert "teardown ran" in Path(full.log_path).read_text()


def test_a_notebooks_bootstrap_is_forked_and_its_kernel_started_fresh(tmp_path: Path) -> None:
    """run_notebook.py (nbclient, jupyter_client) is forked from a notebook server; the kernel
    it starts is a fresh interpreter of its own, in a session of its own."""
    seen = tmp_path / "chain.json"
    source = (
        "import json, os, pathlib\n"
        "def parent(pid):\n"
        "    with open(f'/proc/{pid}/stat', 'rb') as fh:\n"
        "        return int(fh.read().rsplit(b')', 1)[1].split()[1])\n"
        "def cmd(pid):\n"
        "    raw = pathlib.Path(f'/proc/{pid}/cmdline').read_bytes().rstrip(b'\\0')\n"
        "    return [a.decode() for a in raw.split(b'\\0')]\n"
        "boot = parent(os.getpid()); supervisor = parent(boot); server = parent(supervisor)\n"
        f"pathlib.Path({str(seen)!r}).write_text(json.dumps({{\n"
        "    'kernel': cmd(os.getpid()), 'boot': cmd(boot), 'server': cmd(server),\n"
        "    'kernel_sid': os.getsid(0), 'boot_sid': os.getsid(boot)}))\n"
    )
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    nb["cells"][0]["source"] = source
    (tmp_path / "chain.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    [result] = _run(
        tmp_path, [tmp_path / "chain.ipynb"], ExecTarget(python=Path(sys.executable)), "run"
    )
    assert result.outcome == Outcome.PASS, result.reason
    chain = json.loads(seen.read_text())
    assert chain["boot"][1].endswith("run_notebook.py"), chain
    assert chain["boot"][2] == str(tmp_path / "chain.ipynb")
    assert chain["server"][1].endswith("fork_server.py"), chain
    assert chain["server"][-1] == "notebook"
    assert "kernelapp.launch_new_instance()" in " ".join(chain["kernel"])  # started fresh
    assert chain["kernel_sid"] != chain["boot_sid"]


def test_an_interpreter_that_cannot_serve_runs_its_cases_fresh(tmp_path: Path) -> None:
    """Where the fork server does not start (here the interpreter refuses it), each case runs as
    a fresh process, with the same verdicts: the server is never a verdict."""
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'case "$1" in *fork_server.py) echo "no fork server here" >&2; exit 3;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    (tmp_path / "probe_a.py").write_text(PROBE)
    (tmp_path / "fails.py").write_text("raise SystemExit(2)\n")
    scripts = [tmp_path / "probe_a.py", tmp_path / "fails.py"]
    results = {r.case: r for r in _run(tmp_path, scripts, ExecTarget(python=python), "run")}
    assert results["probe_a.py"].outcome == Outcome.PASS, results["probe_a.py"].reason
    assert results["fails.py"].exit_code == 2
    probe = json.loads((tmp_path / "probe_a.json").read_text())
    assert probe["server"] == os.getpid()  # its supervisor's parent is the tool: started fresh


def test_the_switch_starts_every_case_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OFF_ENV, "0")
    (tmp_path / "probe_a.py").write_text(PROBE)
    [result] = _run(
        tmp_path, [tmp_path / "probe_a.py"], ExecTarget(python=Path(sys.executable)), "run"
    )
    assert result.outcome == Outcome.PASS, result.reason
    assert json.loads((tmp_path / "probe_a.json").read_text())["server"] == os.getpid()


def test_two_environments_start_their_servers_side_by_side(tmp_path: Path) -> None:
    """A server's start (half a second for a notebook server) holds up only its own environment:
    here each cell's interpreter lets its server start only once the other cell's has begun, so
    the two are forked only if the servers start side by side (one after the other, each would
    give up waiting and its cell would run fresh)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'case "$1" in *fork_server.py)\n'
        f'  : > "{marks}/$PROBE_MARKER"; i=0\n'
        f'  while [ ! -e "{marks}/$OTHER" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n'
        f'  [ -e "{marks}/$OTHER" ] || exit 3;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    options = RunOptions(results_dir=tmp_path / "run", jobs=2, timeout_s=60, api_logs=False)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    pool = Pool(2)
    for mine, other in (("a", "b"), ("b", "a")):
        (tmp_path / f"probe_{mine}.py").write_text(PROBE)
        env = {"PROBE_MARKER": mine, "OTHER": other}
        target = ExecTarget(python=python, env=env, cell_id=f"cell-{mine}")
        cases = discover_cases([tmp_path / f"probe_{mine}.py"])
        pool.submit(CaseBatch(cases, target, options, store).jobs())
    pool.close()
    run_pool(pool)
    seen = [json.loads((tmp_path / f"probe_{x}.json").read_text()) for x in "ab"]
    assert [s["marker"] for s in seen] == ["a", "b"]
    assert os.getpid() not in {s["server"] for s in seen}  # both forked, none started fresh
    assert seen[0]["server"] != seen[1]["server"]
