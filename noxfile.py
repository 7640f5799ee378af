"""Front door for cudnn-matrix. Sessions are thin: install the package, then delegate.

Sessions:
    tests     pytest: the suite on 2 workers, then the `alone` files by themselves (with posargs:
              one pytest run, as given)
    lint      ruff check + ruff format --check + mypy
    plan      `cudnn-matrix plan ...` (posargs go to the CLI unchanged)
    cli       any command: `nox -s cli -- COMMAND ...` (works right after the README's set-up)
    validate  the main job: `cudnn-matrix validate ...` (posargs go to the CLI unchanged)
    images    `cudnn-matrix images build|list|prune ...` (posargs go to the CLI)
    base_image  local Python base image from Debian packages (debootstrap + docker import)
    report    `cudnn-matrix report ...` (posargs go to the CLI); with none, renders every format
              of the newest run in reports/runs/ into that run's folder (never a tracked file)
    docs_table  regenerate the committed reports/compat.* from `--results RUN_DIR`
"""

from __future__ import annotations

from pathlib import Path

import nox
from nox.command import CommandFailed

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _install(session: nox.Session, *groups: str) -> None:
    """The package as users install it (`pip install .`, not editable: issue #36, an editable
    install hid a wheel that lacked two packages), plus the named dependency groups. Built again
    from the checkout on every install, in a reused venv too (pip reinstalls a local folder; uv is
    told so with --reinstall-package); `nox -R` skips the install and runs the previous build."""
    deps: list[str] = []
    for group in groups:
        deps.extend(nox.project.dependency_groups(PYPROJECT, group))
    fresh = ["--reinstall-package", "cudnn-matrix"] if session.venv_backend == "uv" else []
    session.install(*fresh, ".", *deps)


#: Without posargs, `nox -s tests` runs the suite in two steps: first all but the files that measure
#: the host's CPUs on 2 pytest-xdist workers, a file per worker (`--dist loadfile`: a module's
#: fixtures are built once), then those files (marked `alone`: CPU demand, load, contention) by
#: themselves, so that no other test's processes weigh on what they measure. 2 is CI's core count.
PARALLEL = ["-n", "2", "--dist", "loadfile", "-m", "not alone"]
ALONE = ["-m", "alone"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite; posargs go to pytest (one run, as given). Without posargs: the suite on
    2 workers, then the `alone` files by themselves; the second runs even where the first failed,
    and the session fails if either did."""
    _install(session, "test")
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    failed = []
    for step in (PARALLEL, ALONE):
        try:
            session.run("pytest", *step)
        except CommandFailed:
            failed.append(" ".join(["pytest", *step]))
    if failed:
        session.error("failed: " + "; ".join(failed))


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff and mypy, as CI runs them."""
    _install(session, "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session(reuse_venv=True)
def cli(session: nox.Session) -> None:
    """Any `cudnn-matrix` command: `nox -s cli -- COMMAND ...` (posargs go to the CLI unchanged)."""
    _install(session)
    session.run("cudnn-matrix", *session.posargs)


@nox.session(reuse_venv=True)
def validate(session: nox.Session) -> None:
    """Plan, build pinned environments, run the cases, print the verdict (exit 0 = signed off)."""
    _install(session)
    session.run("cudnn-matrix", "validate", *session.posargs)


@nox.session(reuse_venv=True)
def plan(session: nox.Session) -> None:
    """Print the planned (and with --show-pruned, pruned) cells."""
    _install(session)
    session.run("cudnn-matrix", "plan", *session.posargs)


@nox.session(reuse_venv=True)
def images(session: nox.Session) -> None:
    """`cudnn-matrix images build|list|prune ...` (posargs go to the CLI unchanged)."""
    _install(session)
    session.run("cudnn-matrix", "images", *session.posargs)


@nox.session(reuse_venv=True)
def base_image(session: nox.Session) -> None:
    """Build the local Python base image from Debian packages (no registry needed; needs root)."""
    _install(session)
    session.run("python", "-m", "validate.cli.base_image", *session.posargs)


#: `report --link-base` of the committed docs table (tests/unit/test_committed_reports.py too).
DOCS_LINK_BASE = ("--link-base", "../")
_FORMATS = {"md": ".md", "rst": ".rst", "json": ".json", "junit": ".junit.xml", "html": ".html"}


def _render_all(
    session: nox.Session, results: list[str], out_dir: Path, link: tuple[str, ...] = ()
) -> None:
    """Every report format of one run into out_dir/compat.*; bug reports beside the md. The
    verdict (and the lists it rests on) is printed once, by the last render: the others are
    quiet (`report -q`)."""
    for n, (fmt, suffix) in enumerate(_FORMATS.items(), start=1):
        extra = ["--bug-reports", str(out_dir / "bug-reports")] if fmt == "md" else []
        extra += list(link) + (["-q"] if n < len(_FORMATS) else [])
        out = ["--format", fmt, "--out", str(out_dir / f"compat{suffix}"), *extra]
        # rendering is not signing off: a "not signed off" verdict (1) still rendered fine
        runs = [a for r in results for a in ("--results", r)]
        session.run("cudnn-matrix", "report", *runs, *out, success_codes=[0, 1])


@nox.session(reuse_venv=True)
def report(session: nox.Session) -> None:
    """Render stored results (exit 1 = not signed off). No posargs: every format of the newest
    run under reports/runs/, written into that run's folder. Never writes a tracked file."""
    _install(session)
    if session.posargs:
        session.run("cudnn-matrix", "report", *session.posargs)
        return
    stored = sorted(Path("reports/runs").glob("*/results.jsonl"), key=lambda p: p.stat().st_mtime)
    if not stored:
        session.error("no run under reports/runs/; run `nox -s validate` first, or pass --results")
    _render_all(session, [str(stored[-1].parent)], stored[-1].parent)


@nox.session(reuse_venv=True)
def docs_table(session: nox.Session) -> None:
    """Regenerate the committed tables reports/compat.* (and reports/bug-reports/) from one run:
    `nox -s docs_table -- --results reports/gpu/<run>/validate`. The only session that writes them."""
    _install(session)
    args = list(session.posargs)
    runs = args[1::2]
    if not runs or args[0::2] != ["--results"] * len(runs):
        session.error(
            "usage: nox -s docs_table -- --results RUN_DIR [--results RUN_DIR ...]"
            " (e.g. reports/gpu/<run>/validate)"
        )
    # links from reports/compat.* to the evidence under reports/gpu/: "../" + the path from the
    # repository root, the same whatever folder a render is written to (the committed-table test)
    _render_all(session, runs, Path("reports"), DOCS_LINK_BASE)
    Path("reports/DOCS_RUNS").write_text("".join(f"{r}\n" for r in runs), encoding="utf-8")
