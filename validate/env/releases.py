"""Released versions of a package: from a simple index (PEP 691 JSON or PEP 503 HTML, what
pip and uv read, so a mirror answers as PyPI would), PyPI's JSON API, or a wheelhouse; the
candidates of a bisect between two of them (cli/bisect.py reads env.sources.BackendStore for a
backend store), ordered by `packaging`; or the commits of a git range of a frontend checkout."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Final

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from validate.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "IndexUnreachable",
    "between",
    "git_range",
    "index_versions",
    "shown_url",
    "simple_versions",
    "wheelhouse_versions",
]

log = logging.getLogger(__name__)

PYPI_JSON: Final = "https://pypi.org/pypi/{name}/json"
#: PEP 691: JSON where the index has it, else the PEP 503 HTML page every index serves.
_SIMPLE_ACCEPT: Final = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
    "text/html;q=0.01"
)


class IndexUnreachable(Exception):
    """The index could not be asked (no network, refused, timed out, not an index page)."""


def shown_url(url: str) -> str:
    """The URL without its user:password part (a mirror's credentials never reach a log)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class _Anchors(HTMLParser):
    """PEP 503: each file is an <a href>, a yanked one carries data-yanked."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            href = found.get("href") or ""
            name = urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])
            self.files.append((name, "data-yanked" in found))


def _file_version(filename: str, want: str) -> str | None:
    """The version of a wheel or sdist of project `want` (canonical name); None otherwise."""
    try:
        if filename.endswith(".whl"):
            name, version, _build, _tags = parse_wheel_filename(filename)
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return str(version) if name == want else None


def _read(url: str, timeout: float) -> tuple[bytes, str] | None:
    """(body, content type) of one index page; None when the index has no such page (404, or
    no such folder of a file:// index)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":  # pip reads a local index folder's index.html
        path = Path(urllib.request.url2pathname(parts.path))
        path = path / "index.html" if path.is_dir() else path
        try:
            return path.read_bytes(), "text/html"
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise IndexUnreachable(str(exc)) from exc
    headers = {"Accept": _SIMPLE_ACCEPT, "User-Agent": "cudnn-matrix"}
    if parts.username is not None or parts.password is not None:
        pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        url = shown_url(url)
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        msg = f"HTTP {exc.code}"
        raise IndexUnreachable(msg) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise IndexUnreachable(str(why)) from exc


def simple_versions(package: str, index: str, *, timeout: float = 5.0) -> dict[str, bool] | None:
    """Versions of `package` on a simple index (PEP 691 JSON, else PEP 503 HTML), each with
    whether every file of it is yanked; None when the index does not have the project (404).
    One request; IndexUnreachable when the index cannot be asked."""
    want = canonicalize_name(package)
    url = f"{index.rstrip('/')}/{want}/"
    log.debug("+ GET %s", shown_url(url))
    page = _read(url, timeout)
    if page is None:
        return None
    body, kind = page
    files: list[tuple[str, bool]] = []
    if "json" in kind:
        try:
            data = json.loads(body)
            files = [(f["filename"], bool(f.get("yanked"))) for f in data["files"]]
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"{shown_url(url)} is not a PEP 691 project page ({exc})"
            raise IndexUnreachable(msg) from exc
    else:
        parser = _Anchors()
        parser.feed(body.decode("utf-8", errors="replace"))
        files = parser.files
    found: dict[str, bool] = {}
    for filename, yanked in files:
        if (version := _file_version(filename, want)) is not None:
            found[version] = found.get(version, True) and yanked
    return found


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
