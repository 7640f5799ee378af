"""Version pins checked against their sources before any work (issue #30 item 1), over real HTTP.

A simple index is served from a folder by python's http.server in a thread: PEP 503 HTML (the
server's own folder listing, which is what a PEP 503 project page is) or PEP 691 JSON (a
handler that answers JSON when asked for it, with a yanked file). The tool runs as a user runs
it (the installed `cudnn-matrix validate`, started in the test's own folder), pointed at the
index by pip's or uv's index setting; no other pip or uv setting of this host reaches it.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from usercli import cli

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

CELL = ["--cuda", "13.0", "--driver", "580", "--arch", "sm90"]
PIN_CHECK = Path(__file__).resolve().parents[2] / "validate/execute/resources/cases/pin_check.py"
#: A yanked release newer than every real 9.12 one: a partial 9.12 must not resolve to it.
YANKED = "nvidia_cudnn_cu13-9.12.9.9-py3-none-manylinux_2_27_x86_64.whl"


class _Index(http.server.SimpleHTTPRequestHandler):
    """Serves `root`; a project page as PEP 691 JSON when asked for it and `json_pages` is on."""

    root: ClassVar[Path]
    json_pages: ClassVar[bool] = False
    seen: ClassVar[list[tuple[str, str]]] = []  # (path, Accept) of every request

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, directory=str(self.root), **kwargs)

    def do_GET(self) -> None:
        accept = self.headers.get("Accept", "")
        type(self).seen.append((self.path, accept))
        folder = self.root / self.path.strip("/")
        if self.json_pages and "vnd.pypi.simple.v1+json" in accept and folder.is_dir():
            files = [
                {"filename": p.name, "url": p.name, "hashes": {}, "yanked": p.name == YANKED}
                for p in sorted(folder.iterdir())
            ]
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": folder.name, "files": files})
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test asserts what the tool printed."""


def _serve(root: Path, *, json_pages: bool) -> Iterator[tuple[str, type[_Index]]]:
    handler = type("Handler", (_Index,), {"root": root, "json_pages": json_pages, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


#: The cuDNN and frontend releases every source here lists, whatever else the shared wheelhouse
#: holds (other tests download more into it): the real wheels where the conftest fetched them,
#: else an empty file of that name (listed, never installed), so each "nearest" is the same on a
#: fresh clone and on a machine that kept its wheelhouse.
LISTED = {
    "nvidia-cudnn-cu13": ("9.12.0.46", "9.13.0.50", "9.13.1.26"),
    "nvidia-cudnn-frontend": ("1.26.0", "1.27.0", "1.32.0"),
}


def _listed(wheelhouse: Path, into: Path, *, per_project: bool) -> Path:
    """`into` as a source holding the wheelhouse's other wheels (links) and exactly LISTED of
    cuDNN and the frontend: simple/<project>/<file> (an index) or one flat folder."""
    for wheel in wheelhouse.glob("*.whl"):
        name, version = parse_wheel_filename(wheel.name)[:2]
        project = canonicalize_name(name)
        if project in LISTED and str(version) not in LISTED[project]:
            continue
        folder = into / "simple" / project if per_project else into
        folder.mkdir(parents=True, exist_ok=True)
        (folder / wheel.name).symlink_to(wheel)
    for listed, releases in LISTED.items():
        place = into / "simple" / listed if per_project else into
        place.mkdir(parents=True, exist_ok=True)
        stem = listed.replace("-", "_")
        for release in releases:
            if not any(place.glob(f"{stem}-{release}-*.whl")):
                (place / f"{stem}-{release}-py3-none-manylinux_2_27_x86_64.whl").write_bytes(b"")
    return into


@pytest.fixture(scope="module")
def index_root(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """simple/<project>/<wheel>: the shared wheelhouse's wheels with exactly LISTED of cuDNN and
    the frontend, and a yanked cuDNN file name that is no wheel at all (listed, never
    installed)."""
    root = _listed(wheelhouse, tmp_path_factory.mktemp("index"), per_project=True)
    (root / "simple" / "nvidia-cudnn-cu13" / YANKED).write_bytes(b"")
    return root


@pytest.fixture
def html_index(index_root: Path) -> Iterator[tuple[str, type[_Index]]]:
    yield from _serve(index_root, json_pages=False)


@pytest.fixture
def json_index(index_root: Path) -> Iterator[tuple[str, type[_Index]]]:
    yield from _serve(index_root, json_pages=True)


def _env(**settings: str) -> dict[str, str]:
    """This process's environment without any pip or uv setting of the host, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1", **settings}


def _nothing_in(folder: Path) -> bool:
    """No run was written: `--results` is made (empty) by the flag's own writability check."""
    return not folder.exists() or not any(folder.rglob("*"))


def _validate(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix validate ARGS` started in `cwd` with (only) `env`."""
    return cli("validate", *args, cwd=cwd, env=env, timeout=600)


def test_a_missing_version_is_refused_before_any_work(
    html_index: tuple[str, type[_Index]], tmp_path: Path
) -> None:
    """pip's index (PEP 503 HTML): --cudnn 9.99.0.1 is one line naming the releases either side,
    exit 2; no run folder, no environment; each project page asked once."""
    url, handler = html_index
    argv = ["--cudnn", "9.99.0.1", "--frontend", "1.27.0", *CELL, "--installer", "pip"]
    argv += ["--results", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")]
    proc = _validate(_env(PIP_INDEX_URL=url), *argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "cudnn-matrix: error: --cudnn 9.99.0.1: nvidia-cudnn-cu13 has no release 9.99.0.1 in "
        f"{url} (nearest: 9.13.0.50, 9.13.1.26)\n"
    )
    assert _nothing_in(tmp_path / "run")
    assert not (tmp_path / "cache").exists()
    asked = [path for path, _ in handler.seen]
    assert asked == ["/simple/nvidia-cudnn-cu13/", "/simple/nvidia-cudnn-frontend/"]


def test_uv_reads_its_own_index_setting_and_pep_691_json(
    json_index: tuple[str, type[_Index]], tmp_path: Path
) -> None:
    """uv's index (UV_DEFAULT_INDEX), answered in PEP 691 JSON: a missing frontend, and a
    matrix file's missing cudnn, both in one line; nothing written."""
    url, handler = json_index
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        '[axes]\ncudnn = ["9.13.0.50", "9.14.0.64"]\nfrontend = ["1.27.0"]\ncuda = ["13.0"]\n'
        'driver = ["580"]\narch = ["sm90"]\n'
    )
    argv = ["--matrix", str(matrix), "--frontend", "1.28.0", "--installer", "uv"]
    proc = _validate(
        _env(UV_DEFAULT_INDEX=url), *argv, "--results", str(tmp_path / "run"), cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "cudnn-matrix: error: --frontend 1.28.0: nvidia-cudnn-frontend has no release 1.28.0 in "
        f"{url} (nearest: 1.26.0, 1.27.0, 1.32.0)\n"
    )
    assert all("vnd.pypi.simple.v1+json" in accept for _, accept in handler.seen)
    proc = _validate(
        _env(UV_DEFAULT_INDEX=url), "--matrix", str(matrix), "--installer", "uv", cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"cudnn-matrix: error: {matrix}: cudnn 9.14.0.64: nvidia-cudnn-cu13 has no release "
        f"9.14.0.64 in {url} (nearest: 9.13.0.50, 9.13.1.26)\n"
    )
    assert _nothing_in(tmp_path / "run")


def test_a_partial_version_resolves_to_the_newest_release_it_names(
    json_index: tuple[str, type[_Index]], tmp_path: Path
) -> None:
    """--cudnn 9.12 is 9.12.0.46 (9.12.9.9 is yanked): said on stderr, run and stored in
    run.json; the environment is built from the index with the resolved pin."""
    url, _handler = json_index
    run = tmp_path / "run"
    argv = ["--cudnn", "9.12", "--frontend", "1.27.0", *CELL, "--installer", "pip"]
    argv += ["--no-backend-deps", "--cases", str(PIN_CHECK), "--results", str(run)]
    proc = _validate(
        _env(PIP_INDEX_URL=url), *argv, "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path
    )
    said = (
        "--cudnn 9.12: resolved to 9.12.0.46, the newest 9.12 release of nvidia-cudnn-cu13 in "
        f"{url}"
    )
    assert said in proc.stderr.splitlines(), proc.stderr
    meta = json.loads((run / "run.json").read_text())
    assert meta["versions"] == {
        "source": url,
        "checked": True,
        "resolved": {"cudnn": {"9.12": "9.12.0.46"}},
    }
    result = json.loads((run / "results.jsonl").read_text().splitlines()[0])
    assert result["cell"]["cudnn"] == "9.12.0.46"
    assert result["outcome"] == "pass", result
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_unreachable_index_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    """A closed port: one line that the pins were not checked; the run goes on with them as
    given (here its environment cannot be built offline either: `error`, exit 1)."""
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/simple/"
    run = tmp_path / "run"
    argv = ["--cudnn", "9.12", "--frontend", "1.27.0", *CELL, "--installer", "pip"]
    argv += ["--cases", str(PIN_CHECK), "--results", str(run)]
    env = _env(PIP_INDEX_URL=url, PIP_RETRIES="0", PIP_TIMEOUT="2")
    proc = _validate(env, *argv, "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    warned = [line for line in proc.stderr.splitlines() if "could not check" in line]
    assert warned == [
        (
            f"warning: could not check the versions against {url} ([Errno 111] Connection "
            "refused); going on with the pins as given"
        )
    ], proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    meta = json.loads((run / "run.json").read_text())
    assert meta["versions"]["checked"] is False
    assert meta["versions"]["resolved"] == {}
    result = json.loads((run / "results.jsonl").read_text().splitlines()[0])
    assert result["cell"]["cudnn"] == "9.12"  # as given
    assert result["outcome"] == "error"


def test_the_wheelhouse_is_the_source_with_wheelhouse(wheelhouse: Path, tmp_path: Path) -> None:
    """--wheelhouse: the installs run --no-index, so the wheelhouse is all there is."""
    wheelhouse = _listed(wheelhouse, tmp_path / "wheelhouse", per_project=False)
    argv = ["--cudnn", "9.12.0.99", "--frontend", "1.27.0", *CELL, "--wheelhouse", str(wheelhouse)]
    proc = _validate(_env(), *argv, "--results", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "cudnn-matrix: error: --cudnn 9.12.0.99: nvidia-cudnn-cu13 has no release 9.12.0.99 in "
        f"--wheelhouse {wheelhouse} (nearest: 9.12.0.46, 9.13.0.50, 9.13.1.26)\n"
    )
    assert _nothing_in(tmp_path / "run")


def test_the_backend_store_is_the_source_with_a_store(tmp_path: Path) -> None:
    """--backend-store: a --cudnn value it lacks is refused (a matrix value it lacks stays that
    cell's `error`, as the store's README paragraph says). The store's folders hold a file named
    libcudnn.so.9 each: the listing reads names, nothing is loaded before the refusal."""
    store = tmp_path / "store"
    for name in ("9.12.0.46", "cudnn-linux-x86_64-9.13.0.50_cuda13-archive"):
        (store / name / "lib").mkdir(parents=True)
        (store / name / "lib" / "libcudnn.so.9").write_bytes(b"")
    argv = ["--cudnn", "9.14.0.64", "--frontend", "1.27.0", *CELL]
    argv += ["--backend-store", str(store), "--frontend-source", "current"]
    proc = _validate(_env(), *argv, "--results", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "cudnn-matrix: error: --cudnn 9.14.0.64: no backend 9.14.0.64 in --backend-store "
        f"{store} (nearest: 9.12.0.46, 9.13.0.50)\n"
    )
    assert _nothing_in(tmp_path / "run")
