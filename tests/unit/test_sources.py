"""Parsing backend/frontend sources and reading a library folder's version (no installs)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

from validate.env.sources import (
    BackendSource,
    BackendStore,
    Sources,
    backend_package,
    decode_backend_version,
    find_backend_libdir,
    missing_sublibraries,
    parse_backend_source,
    parse_frontend_source,
    read_libdir_version,
    same_backend,
    short_version,
)
from validate.errors import ConfigError, EnvBuildError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

_BACKEND_WHEEL = "nvidia_cudnn_cu13-9.12.0.46-py3-none-manylinux_2_27_x86_64.whl"
_FRONTEND_WHEEL = "nvidia_cudnn_frontend-1.26.0-cp311-cp311-manylinux_2_27_x86_64.whl"


def _header(major: int, minor: int, patch: int) -> str:
    return (
        f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n"
        f"#define CUDNN_PATCHLEVEL {patch}\n"
        "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n"
    )


def _tarball(root: Path, version: tuple[int, int, int] | None) -> Path:
    """The layout of cudnn-linux-x86_64-<ver>_cuda13-archive: lib/ and include/."""
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libcudnn.so.9").write_bytes(b"not a real library")
    if version is not None:
        (root / "include").mkdir()
        (root / "include" / "cudnn_version.h").write_text(_header(*version))
    return root


@pytest.mark.parametrize(
    ("value", "expected"),
    [(91200, "9.12.0"), (92400, "9.24.0"), (92801, "9.28.1"), (8907, "8.9.7")],
)
def test_decode_backend_version(value: int, expected: str) -> None:
    assert decode_backend_version(value) == expected


@pytest.mark.parametrize(
    ("declared", "loaded", "same"),
    [
        ("9.24.0.43", 92400, True),
        ("9.24.0.43", "9.24.0", True),
        ("9.24.0.43", 92401, False),
        ("9.24.1.1", "9.24.0", False),
        ("9.25", 92500, True),
    ],
)
def test_same_backend(declared: str, loaded: str | int, same: bool) -> None:
    assert same_backend(declared, loaded) is same


def test_short_version() -> None:
    assert short_version("9.24.0.43") == "9.24.0"
    assert short_version("9.25") == "9.25.0"


@pytest.mark.parametrize(
    ("cuda", "package"), [(12, "nvidia-cudnn-cu12"), (13, "nvidia-cudnn-cu13")]
)
def test_pypi_backend_package_follows_cuda_major(cuda: int, package: str) -> None:
    source = parse_backend_source("9.24.0.43")
    assert source == BackendSource(kind="pypi", version="9.24.0.43")
    assert source.requirement(cuda) == f"{package}==9.24.0.43"
    assert backend_package(cuda) == package


def test_backend_for_cuda_11_is_refused() -> None:
    with pytest.raises(ConfigError, match="CUDA 11"):
        backend_package(11)


def test_backend_version_contradicting_the_cell_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--backend-source: 9\.12\.0\.46 contradicts"):
        parse_backend_source("9.12.0.46", declared="9.24.0.43")


def test_backend_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / _BACKEND_WHEEL
    wheel.write_bytes(b"x" * 10)
    source = parse_backend_source(str(wheel), declared="9.12.0.46")
    assert (source.kind, source.version, source.path) == ("wheel", "9.12.0.46", wheel)
    assert source.requirement(13) == str(wheel)
    assert source.pin() == f"wheel:{_BACKEND_WHEEL}:10"


def test_backend_wheel_of_another_version_is_an_env_error(tmp_path: Path) -> None:
    wheel = tmp_path / _BACKEND_WHEEL
    wheel.touch()
    with pytest.raises(EnvBuildError, match=r"is cuDNN 9\.12\.0\.46, but the cell declares 9\.24"):
        parse_backend_source(str(wheel), declared="9.24.0.43")


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("missing.whl", "does not exist"),
        ("nvidia_cudnn_frontend-1.26.0-py3-none-any.whl", "not an nvidia-cudnn-cu12/-cu13 wheel"),
        ("garbage.whl", "not a wheel file name"),
    ],
)
def test_bad_backend_wheels(tmp_path: Path, name: str, match: str) -> None:
    if name != "missing.whl":
        (tmp_path / name).touch()
    with pytest.raises(ConfigError, match=match):
        parse_backend_source(str(tmp_path / name))


def test_libdir_version_from_header(tmp_path: Path) -> None:
    root = _tarball(tmp_path / "cudnn-archive", (9, 24, 0))
    source = parse_backend_source(str(root), declared="9.24.0.43")
    assert source.kind == "libdir"
    assert source.version == "9.24.0.43"
    assert source.libdir() == root / "lib"
    assert source.requirement(13) is None


def test_libdir_undeclared_takes_the_library_version(tmp_path: Path) -> None:
    root = _tarball(tmp_path / "cudnn-archive", (9, 12, 0))
    assert parse_backend_source(str(root)).version == "9.12.0"


def test_libdir_mismatch_is_an_env_error(tmp_path: Path) -> None:
    root = _tarball(tmp_path / "cudnn-archive", (9, 12, 0))
    with pytest.raises(
        EnvBuildError, match=r"is cuDNN 9\.12\.0, but the cell declares 9\.24\.0\.43"
    ):
        parse_backend_source(str(root), declared="9.24.0.43")


def test_libdir_without_header_loads_the_library_and_reports_failure(tmp_path: Path) -> None:
    """No header: the version comes from cudnnGetVersion() in a subprocess; a junk file fails."""
    root = _tarball(tmp_path / "cudnn-archive", None)
    with pytest.raises(EnvBuildError, match="cannot read the cuDNN version"):
        read_libdir_version(root / "lib")


def test_folder_without_libcudnn(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds no libcudnn\.so\.9"):
        parse_backend_source(str(tmp_path))
    assert find_backend_libdir(tmp_path) is None


@pytest.mark.parametrize("text", ["nine", "/no/such/dir", ""])
def test_unparseable_backend(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--backend-source: .* is neither"):
        parse_backend_source(text)


def test_current() -> None:
    assert parse_backend_source("current", declared="9.19.0").kind == "current"
    assert parse_frontend_source("current").kind == "current"


def test_frontend_pypi_and_wheel(tmp_path: Path) -> None:
    pypi = parse_frontend_source("1.27.0")
    assert pypi.requirement() == "nvidia-cudnn-frontend==1.27.0"
    wheel = tmp_path / _FRONTEND_WHEEL
    wheel.touch()
    source = parse_frontend_source(str(wheel))
    assert (source.kind, source.version, source.requirement()) == ("wheel", "1.26.0", str(wheel))
    (tmp_path / _BACKEND_WHEEL).touch()
    with pytest.raises(ConfigError, match="is not an nvidia-cudnn-frontend wheel"):
        parse_frontend_source(str(tmp_path / _BACKEND_WHEEL))


def _git(repo: Path, *args: str) -> str:
    argv = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def test_frontend_git_checkout_resolves_the_commit(tmp_path: Path) -> None:
    repo = tmp_path / "cudnn-frontend"
    repo.mkdir()
    _git(repo, "init", "--quiet")
    (repo / "README").write_text("one\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "--quiet", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD")
    _git(repo, "tag", "v1")
    (repo / "README").write_text("two\n")
    _git(repo, "commit", "--quiet", "-am", "two")
    head = parse_frontend_source(str(repo))
    tagged = parse_frontend_source(f"{repo}@v1")
    assert (head.kind, head.ref) == ("git", "HEAD")
    assert tagged.commit == first != head.commit
    assert tagged.pin() == f"git:{first}"
    with pytest.raises(ConfigError, match="ref 'nope' not found"):
        parse_frontend_source(f"{repo}@nope")
    mirror = tmp_path / "mirror.git"  # a bare clone (what `git clone --mirror` or a CI cache holds)
    subprocess.run(["git", "clone", "--quiet", "--bare", str(repo), str(mirror)], check=True)
    assert parse_frontend_source(f"{mirror}@v1").commit == first


def test_frontend_garbage(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--frontend-source: .* is neither"):
        parse_frontend_source(str(tmp_path))


# --- --backend-store ----------------------------------------------------------------------


def _store(root: Path) -> Path:
    """9.12.0.46 as a wheel's nvidia/cudnn tree, 9.13.0.50 as the redist archive for CUDA 13
    and 9.14.0.64 only for CUDA 12; a README and a folder of another name are skipped."""
    _tarball(root / "9.12.0.46", (9, 12, 0))
    _tarball(root / "cudnn-linux-x86_64-9.13.0.50_cuda13-archive", (9, 13, 0))
    _tarball(root / "cudnn-linux-sbsa-9.14.0.64_cuda12-archive", (9, 14, 0))
    (root / "notes").mkdir()
    (root / "README").write_text("not a backend")
    return root


def test_store_finds_each_layout_by_axis_equality(tmp_path: Path) -> None:
    store = BackendStore(_store(tmp_path))
    assert store.find("9.12.0.46") == tmp_path / "9.12.0.46" / "lib"
    assert store.find("9.12.0.46.0", "13.0") == tmp_path / "9.12.0.46" / "lib"  # no CUDA in name
    archive = tmp_path / "cudnn-linux-x86_64-9.13.0.50_cuda13-archive" / "lib"
    assert store.find("9.13.0.50", "13.0") == archive
    assert store.find("9.13.0.50.0") == archive
    assert store.find("9.13.0", "13.0") is None  # another build is another pin
    assert store.find("9.14.0.64", "13.0") is None  # only a CUDA 12 archive of it
    assert store.find("9.14.0.64", "12.8") is not None
    assert store.versions() == ["9.12.0.46", "9.13.0.50 (cuda13)", "9.14.0.64 (cuda12)"]


def test_sources_from_a_store_are_library_folders_and_a_missing_one_says_why(
    tmp_path: Path,
) -> None:
    sources = Sources(store=_store(tmp_path))
    got = sources.backend("9.13.0.50.0", "13.0")
    assert got is not None
    assert got.kind == "libdir"
    assert got.libdir() == tmp_path / "cudnn-linux-x86_64-9.13.0.50_cuda13-archive" / "lib"
    assert sources.unavailable("9.13.0.50.0", "13.0") is None
    why = sources.unavailable("9.24.0.43", "13.0")
    assert why == (
        f"backend 9.24.0.43 for CUDA 13.0 is not in --backend-store {tmp_path} "
        "(it has 9.12.0.46, 9.13.0.50 (cuda13), 9.14.0.64 (cuda12))"
    )
    with pytest.raises(EnvBuildError, match="not in --backend-store"):
        sources.backend("9.24.0.43", "13.0")


def test_a_store_folder_that_holds_another_version_is_unavailable_for_that_cell(
    tmp_path: Path,
) -> None:
    _tarball(tmp_path / "9.24.0.43", (9, 22, 0))  # named 9.24, holds 9.22
    why = Sources(store=tmp_path).unavailable("9.24.0.43")
    assert why is not None
    assert why.startswith("--backend-store: library folder")
    assert "is cuDNN 9.22.0, but the cell declares 9.24.0.43" in why


def _a_file(path: Path) -> Path:
    path.write_text("")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "absent", "not a folder"),
        (lambda root: _a_file(root / "x"), "not a folder"),
        (lambda root: root, "holds no backend folder (it is empty)"),
        (
            lambda root: (root / "9.12.0.46").mkdir() or root,
            "holds no backend folder (skipped: 9.12.0.46 (no libcudnn.so.9))",
        ),
        (
            lambda root: (root / "cudnn-9").mkdir() or root,
            "skipped: cudnn-9 (not <version> or cudnn-linux-<arch>-<version>_cuda<N>-archive)",
        ),
    ],
    ids=["absent", "a-file", "empty", "no-dispatcher", "unknown-name"],
)
def test_a_bad_store_is_a_config_error(
    make: Callable[[Path], Path], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"^--backend-store ") as err:
        Sources(store=make(tmp_path))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_store_and_backend_source_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give one of them"):
        Sources("9.12.0.46", store=_store(tmp_path))


def test_missing_sublibraries_names_the_fixed_set_and_what_the_loaders_name(
    tmp_path: Path,
) -> None:
    lib = _tarball(tmp_path / "b", (9, 25, 1)) / "lib"
    (lib / "libcudnn.so.9").write_bytes(b"\x7fELF..libcudnn_graph.so.9\0libcudnn_ext.so\0")
    (lib / "libcudnn_graph.so.9").write_bytes(b"libcudnn_engines_tensor_ir.so.9\0")
    for name in ("heuristic", "engines_precompiled", "engines_runtime_compiled", "adv"):
        (lib / f"libcudnn_{name}.so.9").write_bytes(b"")
    (lib / "libcudnn_cnn.so.9.25.1").write_bytes(b"")  # the redist file name counts
    assert missing_sublibraries(lib) == [
        "libcudnn_ops",
        "libcudnn_ext",
        "libcudnn_engines_tensor_ir",
    ]
    for name in ("ops", "ext", "engines_tensor_ir"):
        (lib / f"libcudnn_{name}.so.9").write_bytes(b"")
    assert missing_sublibraries(lib) == []
