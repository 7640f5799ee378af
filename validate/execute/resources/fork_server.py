"""Fork server for case bootstraps; executed by the CASE env's Python. Stdlib only (Python 3.9+),
and what the bootstrap imports (for notebooks, what run_notebook.py imports).

Usage: python fork_server.py ROOM BOOTSTRAP KIND   (requests on stdin, answers on stdout; ROOM
is TITLE_ROOM spaces, the room for each case's command line; BOOTSTRAP the file a fresh start of
the kind's cases runs, which defines `fork_boot()`; KIND only names it, in messages and `ps`)

A fresh `python run_script.py ...` per case pays the interpreter's start (about 15 ms) and the
bootstrap's imports every time, which is most of a small script's cost (bench/runner_bench.py).
This process is started once per interpreter and environment, imports the bootstrap once and
forks one child per case. Each child is a process of its own, in a session of its own, exactly as
a fresh start would be where it counts for a case: it runs the script as `__main__` through the
same bootstrap (script_boot.main, its supervisor and report), with its output in the case's log
and its own environment. What a child shares with its siblings is only what this process had
before the fork: the interpreter, its start-up flags and hash seed, and the stdlib modules the
bootstrap imports. No backend or case code is ever loaded here, so a library that reads its
environment at load (cuDNN's API logs, CUDA_VISIBLE_DEVICES) sees the child's own. A notebook's
bootstrap is forked the same way (nbclient and jupyter_client imported once); its kernel, where
the notebook's code runs, is still started fresh by jupyter_client, as before.

Everything the loader reads at start (LD_LIBRARY_PATH, LD_PRELOAD) and Python reads at start
(PYTHON*) is this process's: the runner keeps one server per interpreter and environment and
sends only the variables in LATE (read when a case runs) with each request.

Requests: `LENGTH\n` and then LENGTH bytes, NUL-separated: ID, ARGV0 (the interpreter path, as
the case's command line shows it), LOG, NICE (the case's nice value; empty: the server's), N, the N
arguments (SCRIPT REPORT ARGS...), then the LATE variables as NAME=VALUE (no argument or variable
can hold a NUL).
Answers, one line each: `ready PID` once; per request `pid ID PID` once the child has its own
session (so its process group exists) or `error ID TEXT`, then `status ID STATUS` (the raw wait
status) when it ends. End of stdin (the tool closed it, or died) ends every child's group and
this process. No json here: its decoder imports `re`, and every module loaded here is in each
child, to be torn down at its exit (milliseconds of every case).
"""

# ruff: noqa: SIM105 - try/except/pass rather than contextlib: stdlib modules a case may not load

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from typing import Any
else:
    try:  # the C module: `signal` builds its IntEnums at import (and each child tears them down)
        import _signal as signal
    except ImportError:  # pragma: no cover - not CPython
        import signal

#: Variables a case may set differently from its server: read after the start (by the
#: bootstrap, by cuDNN and the frontend when they load, by the CUDA driver at init).
LATE = (
    "CUDNN_MATRIX_RESULT_FILE",
    "CUDNN_MATRIX_PARENT_PID",
    "CUDNN_FRONTEND_LOG_INFO",
    "CUDNN_FRONTEND_LOG_FILE",
    "CUDNN_LOGLEVEL_DBG",
    "CUDNN_LOGDEST_DBG",
    "CUDNN_MATRIX_CASE_TOKEN",  # execute/launch.py: how the tool finds what the case left
    "CUDNN_MATRIX_LEFTOVERS_FILE",  # guard.py: where the case's supervisor names what it killed
    "CUDNN_MATRIX_CPUS",  # the case's CPUs (its placement), applied by the child itself
    "CUDNN_MATRIX_CGROUP_PROCS",  # the case's own cgroup (execute/cgroups.py), joined likewise
)

_ARGV0: list[str] = []  # the bootstrap's path: each case's sys.argv[0], as a fresh start has it


def _write(fd: int, line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _request(payload: bytes) -> dict[str, Any]:
    fields = [os.fsdecode(f) for f in payload.split(b"\0")]
    n = int(fields[4])
    argv, late = fields[5 : 5 + n], fields[5 + n :]
    env = dict(item.split("=", 1) for item in late)
    return {
        "id": fields[0],
        "python": fields[1],
        "log": fields[2],
        "nice": fields[3],
        "argv": argv,
        "env": env,
    }


#: The server's last argument: room in its argument area for a child's command line (_retitle).
TITLE_ROOM = 4096


def _retitle(argv: list[str]) -> None:
    """Make this process's command line (ps, /proc/PID/cmdline) the one a fresh start of the
    case has: `python run_script.py SCRIPT REPORT ARGS...`, cut to the room the server's own
    arguments left (TITLE_ROOM). Written into the argument area through /proc/self/mem, as
    setproctitle does, keeping its last byte NUL; where that is refused the server's stays."""
    try:
        with open("/proc/self/stat", "rb") as fh:  # noqa: PTH123 - no pathlib
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49
        title = b"\0".join(os.fsencode(a) for a in argv)[: end - start - 1]
        with open("/proc/self/mem", "r+b", buffering=0) as mem:  # noqa: PTH123
            mem.seek(start)
            mem.write(title.ljust(end - start, b"\0"))
    except (OSError, ValueError, IndexError):
        pass


def _lower(nice: int) -> None:
    """Take the nice the tool gave this case (one started beside a critical-path case) before any
    of its code runs, so everything it starts inherits it; and its session's CPU share, where
    the kernel groups CPU time by session (sched autogroup). What the tool does from outside
    (supervise._lower_priority) lands only after the case has begun."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as fh:  # noqa: PTH123
            fh.write(str(nice))
    except OSError:  # no autogroup here: the process nice is all
        pass


def _child(request: dict[str, Any], boot: Any, closing: list[int]) -> int:
    """In the forked child, after setsid: become the case, as run_script.py would. Returns the
    exit code (the interpreter then exits as after a plain run: atexit, threads, flush)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in closing:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    if request["nice"]:
        _lower(int(request["nice"]))
    for name in LATE:
        os.environ.pop(name, None)
    os.environ.update(request["env"])
    os.environ["CUDNN_MATRIX_PARENT_PID"] = str(os.getppid())  # guard.py: dies with this server
    procs = request["env"].get("CUDNN_MATRIX_CGROUP_PROCS")
    if procs:  # the case's own cgroup, as a fresh process joins it before exec
        try:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            pass  # refused: the token scan still reaps what it leaves
    cpus = request["env"].get("CUDNN_MATRIX_CPUS")
    if cpus:  # the launcher's placement, as a fresh process gets it before exec
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    sys.argv = [_ARGV0[0], *request["argv"]]
    _retitle([request["python"], *sys.argv])
    sys.path[0] = os.path.dirname(_ARGV0[0])  # noqa: PTH120 - as a fresh start of the bootstrap
    return int(boot())


def _drain(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 512):
                return
        except OSError:  # BlockingIOError: nothing more to read
            return


def _reap(live: dict[int, str], out: int) -> None:
    """Answer the status of every child that ended."""
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ident = live.pop(pid, None)
        if ident is not None:
            _write(out, f"status {ident} {status}")


#: Modules this server had loaded before it forked (what the child did not load itself).
_BEFORE: set[str] = set()


def _only_stdlib() -> bool:
    """Whether the case loaded nothing but the standard library: every module is the stdlib's,
    the bootstrap's, or one the server had (site's pure-Python hooks). Python 3.10+."""
    stdlib = getattr(sys, "stdlib_module_names", None)
    if stdlib is None:
        return False
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if top in stdlib or top.startswith("_cudnn_matrix_") or name == "__main__":
            continue
        if name in _BEFORE and str(getattr(module, "__file__", "")).endswith(".py"):
            continue
        return False
    return True


def _exit(code: int) -> None:
    """End the case as its interpreter would. A case that loaded anything beyond the standard
    library (torch, the frontend: native code whose teardown can crash, and must be seen to)
    goes through the interpreter's full finalization, as after `python SCRIPT`. One that loaded
    only the standard library runs the same steps up to the module teardown (threads joined,
    atexit handlers, streams flushed, 120 where that fails) and then ends: the teardown would
    touch, and so copy, every page it shares with the server, about 3 ms of a small case. What
    it skips is only the __del__ of objects alive at exit, which Python does not promise."""
    if not _only_stdlib():
        sys.exit(code)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # what the finalization calls first
    import atexit

    atexit._run_exitfuncs()  # its next step
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - as the interpreter does at exit
            code = code or 120
    os._exit(code)


def _fork(request: dict[str, Any], boot: Any, closing: list[int]) -> int:
    """Fork the case; returns its pid once it has a session of its own. The child never returns:
    it exits as the case's interpreter would."""
    ready_r, ready_w = os.pipe()
    import gc

    gc.freeze()  # no collection in the child copies the pages made so far
    try:
        pid = os.fork()
    except OSError:
        os.close(ready_r)
        os.close(ready_w)
        raise
    if pid == 0:  # the case
        code = 1
        try:
            os.close(ready_r)
            os.setsid()
            os.close(ready_w)  # its session (and process group) exists: the server may say so
            code = _child(request, boot, closing)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - the bootstrap itself broke: say so in the log
            import traceback

            traceback.print_exc()
            os._exit(1)
        _exit(code)
    os.close(ready_w)
    os.read(ready_r, 1)  # end of file once the child called setsid (or died)
    os.close(ready_r)
    return pid


def _serve(boot: Any) -> int:
    import select

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    signal.set_wakeup_fd(wake_w)
    out = 1
    closing = [wake_r, wake_w]  # stdin and stdout are replaced in the child (dup2)
    live: dict[int, str] = {}  # child pid -> request id
    buffer = b""
    _write(out, f"ready {os.getpid()}")
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd == wake_r:
                _drain(wake_r)
                _reap(live, out)
                continue
            chunk = os.read(0, 65536)
            if not chunk:  # the tool is gone: so are its cases
                for pid in live:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:  # it ended meanwhile
                        pass
                return 0
            buffer += chunk
            while b"\n" in buffer:
                header, rest = buffer.split(b"\n", 1)
                size = int(header)
                if len(rest) < size:
                    break
                request, buffer = _request(rest[:size]), rest[size:]
                try:
                    pid = _fork(request, boot, closing)
                except OSError as exc:
                    _write(out, f"error {request['id']} fork: {exc}")
                    continue
                live[pid] = request["id"]
                _write(out, f"pid {request['id']} {pid}")


def _load(path: str) -> Any:
    """Import the bootstrap at `path` (kept under a private name: a case's own module of that name
    is its own) and what it needs, once, through its `fork_boot()`: the script bootstrap and the
    stdlib it needs, or run_notebook.py with nbclient, nbformat and jupyter_client (a third of a
    small notebook's CPU time, bench/runner_bench.py). Returns what runs one case."""
    _ARGV0.append(path)
    folder, file = os.path.split(path)
    if sys.path[:1] != [folder]:  # python -P adds no script folder
        sys.path.insert(0, folder)
    name = file.rpartition(".")[0]
    module = __import__(name)
    sys.modules[f"_cudnn_matrix_{name}"] = sys.modules.pop(name)
    return module.fork_boot()


def main() -> int:
    boot_path, kind = sys.argv[2], sys.argv[3]  # after ROOM
    boot = _load(boot_path)
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        # a thread would not survive the fork (and what it holds, locks included, would be
        # copied mid-use): no server; the tool starts these cases fresh
        print(f"fork server: {kind} bootstrap started a thread at import", file=sys.stderr)
        return 3
    _BEFORE.update(sys.modules)
    return _serve(boot)


if __name__ == "__main__":
    sys.exit(main())
