"""User-facing failures, each with a distinct exit code; only `cli.main()` prints them."""

from __future__ import annotations

__all__ = [
    "CaseError",
    "ConfigError",
    "DockerError",
    "EnvBuildError",
    "ImageBuildError",
    "MatrixError",
    "ResultsError",
    "ResultsLost",
    "ValidateError",
]


class ValidateError(Exception):
    """Base class: a failure the user can act on; `return_code` is the process exit status."""

    return_code: int = 2


class ConfigError(ValidateError):
    """Bad command-line input (flag value, missing path)."""

    return_code = 2


class MatrixError(ValidateError):
    """Bad matrix/rules/known-issues/cases TOML, or a selection that leaves nothing."""

    return_code = 2


class ResultsError(ValidateError):
    """A stored run that this tool cannot read (e.g. written by a newer results schema)."""

    return_code = 2


class ResultsLost(ValidateError):
    """The results folder broke mid-run (disk full, folder or file deleted): no new case starts,
    every finished result is kept where that is possible, the message names the cause."""

    return_code = 5


class CaseError(ValidateError):
    """A case file or folder that cannot be read or discovered."""

    return_code = 2


class EnvBuildError(ValidateError):
    """An environment for a cell could not be built (install failed, wheel missing).
    `signalled`: a signal ended the process that failed (the installer, a build step), which is
    what a stop of the tool does to it (Ctrl-C, SIGTERM to the tool's group), so the caller asks
    whether a stop follows before it calls the build failed (execute/local.py)."""

    return_code = 3

    def __init__(self, *args: object, signalled: bool = False) -> None:
        super().__init__(*args)
        self.signalled = signalled


class DockerError(ValidateError):
    """The docker daemon is unreachable or refused a request."""

    return_code = 4


class ImageBuildError(DockerError):
    """A cell image failed to build; the message carries the build log's tail."""

    return_code = 4
