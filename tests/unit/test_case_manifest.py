"""A folder's cases.toml expands one script into several cases with their own argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from validate.errors import CaseError
from validate.execute.cases import discover_cases, select_cases


def _folder(tmp_path: Path, manifest: str) -> Path:
    (tmp_path / "repro.py").write_text("import sys\nprint(sys.argv[1:])\n")
    (tmp_path / "other.py").write_text("print('other')\n")
    (tmp_path / "cases.toml").write_text(manifest)
    return tmp_path


def test_manifest_expands_variants_and_keeps_unlisted_scripts(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        '[[case]]\nname = "repro[a]"\nscript = "repro.py"\nargs = ["--v", "a"]\n'
        'needs_gpu = true\ncpu_part = true\nmin_backend = "9.13"\n'
        '[[case]]\nname = "repro[b]"\nscript = "repro.py"\nargs = ["--v", "b"]\nneeds_gpu = true\n',
    )
    cases = {c.name: c for c in discover_cases([folder])}
    assert sorted(cases) == ["other.py", "repro[a]", "repro[b]"]
    assert cases["repro[a]"].args == ("--v", "a")
    assert not cases["repro[a]"].requirements.needs_gpu  # cpu_part: the script skips by itself
    assert cases["repro[b]"].requirements.needs_gpu
    assert cases["repro[a]"].requirements.min_backend == "9.13"
    assert cases["repro[a]"].slug != cases["repro[b]"].slug
    argv = cases["repro[b]"].command(Path("/py"), Path("/r.json"), 10)
    assert argv[-2:] == ["--v", "b"]
    assert cases["repro[a]"].content_key({}) != cases["repro[b]"].content_key({})


def test_manifest_reports_every_bad_entry(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        '[[case]]\nname = "x"\nscript = "missing.py"\n'
        '[[case]]\nname = "y"\nscript = "repro.py"\nargs = "--v"\n'
        '[[case]]\nname = "z"\nscript = "repro.py"\ncolour = "red"\n',
    )
    with pytest.raises(CaseError) as info:
        discover_cases([folder])
    text = str(info.value)
    manifest = folder / "cases.toml"
    assert f"{manifest}:3: case[0].script: no script .py" in text
    assert f"{manifest}:7: case[1].args: expected a list of strings" in text
    assert f"{manifest}:11: case[2].colour: unknown key" in text
    assert "\n" not in text


def test_select_cases_by_exact_name_or_pattern(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        '[[case]]\nname = "repro[a]"\nscript = "repro.py"\n'
        '[[case]]\nname = "repro[b]"\nscript = "repro.py"\n',
    )
    cases = discover_cases([folder])
    assert [c.name for c in select_cases(cases, ["repro[b]"])] == ["repro[b]"]  # brackets literal
    assert [c.name for c in select_cases(cases, ["repro*"])] == ["repro[a]", "repro[b]"]
    assert len(select_cases(cases, [])) == 3
    with pytest.raises(CaseError, match="--case nope: matches none of the 3 cases"):
        select_cases(cases, ["nope"])
