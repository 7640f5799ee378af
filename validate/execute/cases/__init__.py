"""Cases: one of the kinds in cases/kinds.py (a notebook, a script), discovered from files, folders
or a checkout."""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

from validate.datafile import Key, read_toml
from validate.errors import CaseError
from validate.execute.cases import pytest_suite
from validate.execute.cases.catch2 import CPP_SUFFIXES
from validate.execute.cases.kinds import KINDS, kind_for_path
from validate.execute.resources import RESOURCES
from validate.plan.requirements import DEFAULT_CASES_TOML, Requirements, RequirementTable

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from validate.config import ValidateConfig

__all__ = [
    "KINDS",
    "MANIFEST",
    "SHIPPED_CASES",
    "Case",
    "CaseKind",
    "cases_for",
    "cpp_case",
    "discover_cases",
    "discover_samples",
    "load_manifest",
    "select_cases",
    "suite_case",
]

#: The cases `validate` runs when none are named: the pin check and the #361 fusion repro.
SHIPPED_CASES: Final = RESOURCES / "cases"

#: A case kind's name, a key of KINDS (cases/kinds.py).
CaseKind: TypeAlias = str


@dataclass(frozen=True, kw_only=True)
class Case:
    """One runnable case; `name` is its identity inside a run (results key on it)."""

    name: str
    path: Path
    kind: CaseKind
    requirements: Requirements = field(default_factory=Requirements)
    args: tuple[str, ...] = ()  # script argv (a case manifest can run one script as variants)
    source: str = ""  # where it was declared: its file, or "folder/cases.toml:7 (case[2])"

    @property
    def slug(self) -> str:
        """Folder-safe, collision-free name for the case's evidence folder."""
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("_")[:80]
        ident = "\0".join((str(self.path), *self.args))
        digest = hashlib.sha256(ident.encode("utf-8", "surrogateescape"))  # a non-UTF-8 file name
        return f"{stem}-{digest.hexdigest()[:6]}"

    def content_key(self, cell: Mapping[str, str]) -> str:
        """Hash of the case file and the cell pins (same content + pins -> same key)."""
        try:
            digest = hashlib.sha256(self.path.read_bytes())
        except OSError:  # vanished (another case deleted it): a key no file's content has
            digest = hashlib.sha256(b"\0case file missing\0")
        digest.update("\0".join(self.args).encode())
        for axis, value in sorted(cell.items()):
            digest.update(f"\0{axis}={value}".encode())
        return digest.hexdigest()[:16]

    def command(self, python: Path, report: Path, timeout_s: float) -> list[str]:
        """argv that runs this case under `python` and writes its report JSON."""
        return KINDS[self.kind].command(self, python, report, timeout_s)


def _kind(path: Path) -> CaseKind | None:
    kind = kind_for_path(path)
    return kind.name if kind is not None else None


def _expected() -> str:
    """What a case file is, for an error: "a .ipynb notebook or a .py script"."""
    files = [f"a {k.suffix} {k.name}" for k in KINDS.values() if k.suffix is not None]
    return " or ".join(filter(None, (", ".join(files[:-1]), files[-1])))


def _is_case_file(path: Path) -> bool:
    return (
        _kind(path) is not None
        and not path.name.startswith(("_", "."))
        and ".ipynb_checkpoints" not in path.parts
    )


def discover_cases(paths: Iterable[Path], *, table: RequirementTable | None = None) -> list[Case]:
    """Cases from files and folders (folders: files with a kind's suffix, *.ipynb and *.py,
    recursively, sorted).

    Names are file names; when two cases share one, their paths relative to the common
    folder are used instead so that result keys stay unique.
    """
    found: list[Path] = []
    listed: list[Case] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            manifest = load_manifest(path) if (path / MANIFEST).is_file() else []
            listed.extend(manifest)
            taken = {c.path for c in manifest}
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and _is_case_file(p) and p.resolve() not in taken
            )
        elif path.is_file():
            if _kind(path) is None:
                msg = f"{path}: not a case (expected {_expected()})"
                raise CaseError(msg)
            found.append(path)
        else:
            msg = f"{path}: no such case file or folder"
            raise CaseError(msg)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    names = [p.name for p in unique]
    dupes = {n for n in names if names.count(n) > 1}
    root = Path(_common_root(unique)) if dupes else None
    cases = []
    for path in unique:
        name = str(path.relative_to(root)) if root and path.name in dupes else path.name
        kind = _kind(path)
        assert kind is not None
        req = table.for_case(path.name) if table else Requirements()
        cases.append(Case(name=name, path=path, kind=kind, requirements=req, source=str(path)))
    return check_unique([*listed, *cases])


def check_unique(cases: Sequence[Case]) -> list[Case]:
    """Refuse two cases with one name: results are keyed by cell and case name, so a second one
    would silently replace the first's verdict (a pass hiding a fail). Names both sources."""
    first: dict[str, Case] = {}
    for case in cases:
        other = first.setdefault(case.name, case)
        if other is not case:
            msg = (
                f"two cases share the name {case.name!r}: {other.source or other.path} and "
                f"{case.source or case.path}; rename one (results are keyed by case name)"
            )
            raise CaseError(msg)
    return list(cases)


#: A folder may hold a manifest listing script cases with arguments (one script, many variants).
MANIFEST: Final = "cases.toml"
_MANIFEST_KEYS: Final = frozenset(
    {"name", "script", "args", "needs_gpu", "cpu_part", "min_backend", "exclusive"}
)


def load_manifest(folder: Path) -> list[Case]:
    """Cases from `folder/cases.toml` `[[case]]` entries; every bad entry is reported at once.

    Keys: name, script (relative path), args (list), min_backend, needs_gpu, cpu_part, exclusive.
    A case with ``cpu_part = true`` runs on a host without a GPU too: it does its CPU part and
    reports ``VERDICT skip`` for the rest itself, so `needs_gpu` does not skip it before it
    starts. ``exclusive = true``: it runs with no other case beside it (execute/pool.py).
    """
    path = folder / MANIFEST
    doc = read_toml(path, what="case manifest", error=CaseError)
    errors = doc.errors
    for extra in sorted(set(doc.data) - {"case"}):
        errors.add(Key.of(extra), "unknown key (expected [[case]] tables)")
    entries = doc.data.get("case", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        errors.add(Key.of("case"), "expected an array of tables ([[case]])")
        entries = []
    cases: list[Case] = []
    for i, entry in enumerate(entries):
        key = Key.of("case", i)
        for unknown in sorted(set(entry) - _MANIFEST_KEYS):
            errors.add(key / unknown, f"unknown key (known: {', '.join(sorted(_MANIFEST_KEYS))})")
        script_path = (folder / str(entry.get("script", ""))).resolve()
        if not entry.get("name"):
            errors.add(key / "name", "missing: a case needs a name and a script .py that exists")
            continue
        if not script_path.is_file() or _kind(script_path) != "script":
            errors.add(
                key / "script",
                f"no script .py {script_path} (a case needs a name and a script .py that exists)",
            )
            continue
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            errors.add(key / "args", f"expected a list of strings, got {args!r}")
            continue
        exclusive = entry.get("exclusive", False)
        if not isinstance(exclusive, bool):
            errors.add(key / "exclusive", f"must be true or false, got {exclusive!r}")
            continue
        req = Requirements().updated(
            {
                "needs_gpu": bool(entry.get("needs_gpu")) and not entry.get("cpu_part"),
                "exclusive": exclusive,
                **({"min_backend": entry["min_backend"]} if "min_backend" in entry else {}),
            }
        )
        cases.append(
            Case(
                name=str(entry["name"]),
                path=script_path,
                kind="script",
                requirements=req,
                args=tuple(args),
                source=f"{path}:{doc.errors.line_of(key)} ({key})",
            )
        )
    errors.raise_if_any()
    return cases


def _common_root(paths: list[Path]) -> str:
    parts = [p.parent.parts for p in paths]
    common: list[str] = []
    for items in zip(*parts, strict=False):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return str(Path(*common)) if common else "/"


def discover_samples(checkout: Path, *, requirements: Path | None = None) -> list[Case]:
    """The frontend's sample notebooks (`samples/python/*.ipynb`) with their requirements."""
    folder = checkout / "samples" / "python"
    notebooks = sorted(p for p in folder.glob("*.ipynb") if p.is_file()) if folder.is_dir() else []
    if not notebooks:
        msg = f"{checkout}: no samples/python/*.ipynb here; pass a cudnn-frontend checkout"
        raise CaseError(msg)
    table = RequirementTable.from_toml(requirements or DEFAULT_CASES_TOML)
    return discover_cases(notebooks, table=table)


def suite_case(root: Path, select: str | None, ids: Sequence[str] = ()) -> Case:
    """A pytest suite (`--tests`) as one case of the pytest kind: its selection in `args`, and
    the node ids `--case` names (`FILE::NAME[PARAM]`, as its results are named) after it. Its
    results are named by test id; the suite's own name only where it could not be collected."""
    from validate.execute.collection import Suite  # same stage; imported when a suite is named

    suite = Suite.from_flags(root, select)
    for node in ids:
        if any(c in node.split("[", 1)[0] for c in "*?"):
            msg = (
                f"--case {node}: a pytest node id is exact (pytest matches no glob); select "
                "tests by pattern with --tests-select '-k EXPR'"
            )
            raise CaseError(msg)
        file = node.split("::", 1)[0]
        if not file or not (suite.root / file).exists():
            msg = (
                f"--case {node}: no {file or 'file'} in {suite.root} (a pytest node id, "
                "FILE::NAME as the results name it, FILE relative to --tests)"
            )
            raise CaseError(msg)
    return Case(
        name=suite.name,
        path=suite.root,
        kind=pytest_suite.KIND.name,
        args=(*suite.select, *ids),
        source=str(root),
    )


def cpp_case(
    root: Path,
    targets: Sequence[str] = (),
    catch2: Path | None = None,
    select: Sequence[str] = (),
) -> Case:
    """A CMake project with Catch2 tests (`--cpp`) as one case of the C++ kind: its targets,
    Catch2 source and the TEST_CASEs `select`ed (--case: `FILE::NAME` or a glob; none: all) in
    `args`. Its results are named by TEST_CASE (`FILE::NAME`); the project's own name only where
    it could not be built."""
    from validate.execute.catch2_suite import Catch2Project  # same stage; imported when named

    project = Catch2Project.from_flags(root, targets, catch2, select)
    return Case(
        name=project.name,
        path=project.root,
        kind=KINDS["catch2"].name,
        args=project.args(),
        source=str(root),
    )


def select_cases(
    cases: Sequence[Case], patterns: Sequence[str], flag: str = "--case"
) -> list[Case]:
    """Keep the cases named by `patterns`: an exact name (variant names hold brackets) or an
    fnmatch pattern; all cases when none are given."""
    if not patterns:
        return list(cases)
    kept = [
        c for c in cases if any(c.name == p or fnmatch.fnmatchcase(c.name, p) for p in patterns)
    ]
    if not kept:
        names = ", ".join(c.name for c in cases[:5]) + (", ..." if len(cases) > 5 else "")
        msg = f"{flag} {' '.join(patterns)}: matches none of the {len(cases)} cases ({names})"
        raise CaseError(msg)
    return kept


def plain(config: ValidateConfig) -> bool:
    """Whether the config names cases other than a suite's (files, samples): --case then keeps
    those by name."""
    return bool(config.cases) or config.samples is not None


def _cpp_id(name: str) -> bool:
    """Whether a --case id names a C++ TEST_CASE (`FILE.cpp::NAME`) rather than a
    pytest node id."""
    return name.split("::", 1)[0].endswith(CPP_SUFFIXES)


def cases_for(config: ValidateConfig) -> list[Case]:
    """The cases a config names: its files/folders, a frontend checkout's samples, else the
    shipped ones; kept by --case. The same on the host and inside a cell's container."""
    cases: list[Case] = discover_cases(config.cases) if config.cases else []
    if config.samples is not None:
        cases += discover_samples(config.samples)
    # --case with a suite and no files or samples named: what to run of the suite, as `bisect
    # --case` probes one: pytest node ids of --tests (exact), TEST_CASEs of --cpp (`FILE::NAME`,
    # globs; known once the project is built). With both, each id goes to the suite it names.
    select = config.case_names if not plain(config) else ()
    both = config.tests is not None and config.cpp is not None
    cpp_ids = tuple(n for n in select if not both or _cpp_id(n))
    test_ids = tuple(n for n in select if not both or not _cpp_id(n))
    suites = []
    if config.tests is not None and (test_ids or not (both and select)):
        suites.append(suite_case(config.tests, config.tests_select, test_ids))
    if config.cpp is not None and (cpp_ids or not (both and select)):
        suites.append(cpp_case(config.cpp, config.cpp_targets, config.cpp_catch2, cpp_ids))
    if not config.cases and config.samples is None and not suites:
        cases = discover_cases([SHIPPED_CASES])
    if suites:
        if select:
            return suites
        cases = select_cases(check_unique(cases), config.case_names) if cases else []
        return [*cases, *suites]
    return select_cases(check_unique(cases), config.case_names)
