"""Front door for cudnn-matrix. Sessions are thin: install the package, then delegate.

Sessions:
    tests     pytest (posargs go to pytest)
    lint      ruff check + ruff format --check + mypy
    plan      `cudnn-matrix plan ...` (posargs go to the CLI unchanged)
    validate  the main job: `cudnn-matrix validate ...` (posargs go to the CLI unchanged)
    images    `cudnn-matrix images build|list|prune ...` (posargs go to the CLI)
    base_image  local Python base image from Debian packages (debootstrap + docker import)
    report    `cudnn-matrix report ...` (posargs go to the CLI); with none, regenerates
              reports/compat.{md,rst,json,junit.xml,html} from the newest run in reports/runs/
              (or, when none is stored, the synthetic example run in tests/resources/runs/example)
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _install(session: nox.Session, *groups: str) -> None:
    deps: list[str] = []
    for group in groups:
        deps.extend(nox.project.dependency_groups(PYPROJECT, group))
    session.install("-e", ".", *deps)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite; posargs go to pytest."""
    _install(session, "test")
    session.run("pytest", *session.posargs)


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff and mypy, as CI runs them."""
    _install(session, "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


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


@nox.session(reuse_venv=True)
def report(session: nox.Session) -> None:
    """Render stored results (exit 1 = not signed off); no posargs: regenerate reports/compat.*."""
    _install(session)
    if session.posargs:
        session.run("cudnn-matrix", "report", *session.posargs)
        return
    stored = any(Path("reports/runs").glob("*/results.jsonl"))
    committed = sorted(Path("reports/gpu").glob("*/validate/results.jsonl"))  # real GPU runs
    fallback = str(committed[-1].parent) if committed else "tests/resources/runs/example"
    source = [] if stored else ["--results", fallback]
    formats = {"md": ".md", "rst": ".rst", "json": ".json", "junit": ".junit.xml", "html": ".html"}
    for fmt, suffix in formats.items():
        extra = ["--bug-reports", "reports/bug-reports"] if fmt == "md" else []
        out = ["--format", fmt, "--out", f"reports/compat{suffix}", *extra]
        # regenerating is not signing off: a "not signed off" verdict (1) still rendered fine
        session.run("cudnn-matrix", "report", *source, *out, success_codes=[0, 1])
