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
    """An environment for a cell could not be built (install failed, wheel missing)."""

    return_code = 3


class DockerError(ValidateError):
    """The docker daemon is unreachable or refused a request."""

    return_code = 4


class ImageBuildError(DockerError):
    """A cell image failed to build; the message carries the build log's tail."""

    return_code = 4
