"""The candidates of a bisect: released versions from the package index, a wheelhouse or a
backend store (cli/bisect.py reads env.sources.BackendStore), ordered by `packaging`; or the commits of a git range of a frontend checkout."""

from __future__ import annotations

import json
import logging
import subprocess
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Final

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from validate.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

__all__ = [
    "between",
    "git_range",
    "index_versions",
    "wheelhouse_versions",
]

log = logging.getLogger(__name__)

PYPI_JSON: Final = "https://pypi.org/pypi/{name}/json"


def index_versions(package: str, *, url: str = PYPI_JSON, timeout: float = 30.0) -> list[str]:
    """Versions of `package` on the index (PyPI's JSON API); fully yanked releases left out."""
    where = url.format(name=canonicalize_name(package))
    log.info("+ GET %s", where)
    try:
        with urllib.request.urlopen(where, timeout=timeout) as response:
            data = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        msg = (
            f"bisect: cannot list the releases of {package} from {where} ({exc}); offline, "
            "pass --wheelhouse DIR or --backend-store DIR"
        )
        raise ConfigError(msg) from exc
    releases = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(releases, dict):
        msg = f"bisect: {where} holds no 'releases' table"
        raise ConfigError(msg)
    return [
        version
        for version, files in releases.items()
        if not files or not all(isinstance(f, dict) and f.get("yanked") for f in files)
    ]


def wheelhouse_versions(folder: Path, package: str) -> list[str]:
    """Versions of `package` among the wheels in `folder`."""
    want, found = canonicalize_name(package), set[str]()
    for wheel in folder.glob("*.whl"):
        try:
            name, version, _build, _tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if name == want:
            found.add(str(version))
    return sorted(found, key=Version)


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def between(versions: Iterable[str], good: str, bad: str, *, where: str) -> list[str]:
    """[good, the versions strictly between, bad], ordered from good towards bad.

    Pre-releases are left out unless an end is one. ConfigError when an end is not a version,
    is not among `versions` (`where` names their source) or both ends are the same.
    """
    parsed: dict[Version, str] = {}
    for text in versions:
        if _is_version(text):
            parsed.setdefault(Version(text), text)
    ends = []
    for flag, text in (("--good", good), ("--bad", bad)):
        if not _is_version(text):
            msg = f"bisect: {flag} {text!r} is not a version"
            raise ConfigError(msg)
        version = Version(text)
        if version not in parsed:
            near = ", ".join(parsed[v] for v in sorted(parsed)[-8:]) or "none"
            msg = f"bisect: {flag} {text} is not a release in {where} (newest there: {near})"
            raise ConfigError(msg)
        ends.append(version)
    low, high = sorted(ends)
    if low == high:
        msg = f"bisect: empty range (--good {good} and --bad {bad} are the same release)"
        raise ConfigError(msg)
    pre = low.is_prerelease or high.is_prerelease
    inside = [v for v in sorted(parsed) if low < v < high and (pre or not v.is_prerelease)]
    ordered = [parsed[low], *(parsed[v] for v in inside), parsed[high]]
    return ordered if ends[0] == low else ordered[::-1]


def git_range(checkout: Path, good: str, bad: str, *, all_commits: bool = False) -> list[str]:
    """[good, the commits of good..bad oldest first, bad] as full hashes (first parent only
    unless `all_commits`). ConfigError for an unknown ref, or good not an ancestor of bad."""
    shas = [_rev_parse(checkout, flag, ref) for flag, ref in (("--good", good), ("--bad", bad))]
    if shas[0] == shas[1]:
        msg = f"bisect: empty range (--good {good} and --bad {bad} are the same commit)"
        raise ConfigError(msg)
    ancestor = _git(checkout, "merge-base", "--is-ancestor", shas[0], shas[1])
    if ancestor.returncode != 0:
        msg = f"bisect: --good {good} is not an ancestor of --bad {bad} in {checkout}"
        raise ConfigError(msg)
    args = ["rev-list", "--reverse", *([] if all_commits else ["--first-parent"])]
    listed = _git(checkout, *args, f"{shas[0]}..{shas[1]}")
    commits = listed.stdout.split()
    if listed.returncode != 0 or not commits:
        msg = f"bisect: git rev-list {good}..{bad} in {checkout} is empty ({listed.stderr.strip()})"
        raise ConfigError(msg)
    return [shas[0], *commits]


def _rev_parse(checkout: Path, flag: str, ref: str) -> str:
    proc = _git(checkout, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0:
        msg = f"bisect: {flag} {ref!r} is not a commit in {checkout}"
        raise ConfigError(msg)
    return proc.stdout.strip()


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"bisect: git {' '.join(args[:1])} in {checkout} failed ({exc})"
        raise ConfigError(msg) from exc
