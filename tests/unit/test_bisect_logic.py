"""The bisect logic (judge/bisect.py) with an injected probe, and its candidate lists
(env/releases.py) from real folders and a real git repository."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest
from packaging.specifiers import SpecifierSet

from validate._compat import tomllib
from validate.env import releases
from validate.errors import ConfigError
from validate.judge.bisect import (
    Observation,
    Probe,
    Verdict,
    bisect,
    classify,
    next_index,
    suggested_issue,
)
from validate.judge.known_issues import load_known_issues

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

VERSIONS = [f"9.{minor}.0" for minor in range(13, 26)]  # 9.13.0 ... 9.25.0


def step_at(
    first_bad: str, bad: str = "crash", calls: list[str] | None = None
) -> Callable[[str], str]:
    """A probe that is `pass` below `first_bad` and `bad` from it on; records its calls."""
    index = VERSIONS.index(first_bad)

    def probe(candidate: str) -> str:
        if calls is not None:
            calls.append(candidate)
        return bad if VERSIONS.index(candidate) >= index else "pass"

    return probe


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_boundary_found_wherever_it_is(first_bad: str) -> None:
    calls: list[str] = []
    result = bisect(VERSIONS, step_at(first_bad, calls=calls))
    assert result.found
    assert result.first_bad == first_bad
    assert result.last_good == VERSIONS[VERSIONS.index(first_bad) - 1]
    assert (result.good_class, result.bad_class) == ("pass", "crash")
    assert calls[:2] == [VERSIONS[0], VERSIONS[-1]]  # both ends first
    assert len(calls) <= 2 + 4  # 11 candidates between: at most ceil(log2(12)) more probes
    assert len(set(calls)) == len(calls)


def test_bisect_towards_an_older_bad_end_finds_the_fix() -> None:
    """--good newer than --bad: the walk goes down; the last good is the fix release."""
    walk = VERSIONS[::-1]
    result = bisect(walk, lambda c: "pass" if c in VERSIONS[VERSIONS.index("9.20.0") :] else "fail")
    assert (result.last_good, result.first_bad) == ("9.20.0", "9.19.0")
    issue = suggested_issue(result, axis="cudnn", case="c.py", pins={"frontend": "1.27.0"})
    assert issue is not None
    entry = tomllib.loads(issue)["issue"][0]
    assert entry["backend"] == "<9.20.0"
    assert entry["frontend"] == "==1.27.0"
    assert entry["fixed_in"] == "9.20.0"


def test_an_environment_error_is_skipped_not_counted() -> None:
    probe = step_at("9.19.0")

    def broken_in_the_middle(candidate: str) -> Observation | str:
        if candidate in {"9.18.0", "9.19.0"}:
            return Observation(outcome="error", reason="environment build failed: no wheel")
        return probe(candidate)

    result = bisect(VERSIONS, broken_in_the_middle)
    skipped = {p.candidate: p for p in result.probes if p.verdict is Verdict.SKIP}
    assert "9.19.0" in skipped
    assert "environment build failed: no wheel" in skipped["9.19.0"].note
    assert skipped["9.19.0"].note.startswith("skipped: error is neither good nor bad")
    # 9.18.0 and 9.19.0 are untestable: the first bad is one of them or 9.20.0
    assert not result.found
    assert (result.last_good, result.first_bad) == ("9.17.0", "9.20.0")
    assert result.unresolved == ("9.18.0", "9.19.0")


def test_a_skip_next_to_a_tested_boundary_does_not_hide_it() -> None:
    probe = step_at("9.19.0")
    result = bisect(VERSIONS, lambda c: "error" if c == "9.16.0" else probe(c))
    assert result.found
    assert (result.last_good, result.first_bad) == ("9.18.0", "9.19.0")


def test_repeats_that_disagree_are_reported_and_skipped() -> None:
    probe = step_at("9.20.0")
    flips: dict[str, int] = {}

    def flaky(candidate: str) -> str:
        if candidate != "9.19.0":
            return probe(candidate)
        flips[candidate] = flips.get(candidate, 0) + 1
        return "crash" if flips[candidate] % 2 else "pass"

    result = bisect(VERSIONS, flaky, repeats=3)
    flaky_probe = next(p for p in result.probes if p.candidate == "9.19.0")
    assert flaky_probe.verdict is Verdict.DISAGREE
    assert flaky_probe.outcomes == ("crash", "pass", "crash")
    assert "repeats disagree (crash, pass, crash)" in flaky_probe.note
    assert all(len(p.observations) == 3 for p in result.probes)
    assert (result.last_good, result.first_bad) == ("9.18.0", "9.20.0")
    assert result.unresolved == ("9.19.0",)


def test_a_crash_is_not_a_fail() -> None:
    """bad = the class at --bad: a fail in the middle of a crash bisect counts as good, flagged."""
    probe = step_at("9.20.0")
    result = bisect(VERSIONS, lambda c: "fail" if c == "9.19.0" else probe(c))
    assert result.probes[2].candidate == "9.19.0"  # the middle, probed right after both ends
    fail = result.probes[2]
    assert fail.verdict is Verdict.GOOD
    assert fail.note == "fail is not the bad end's crash: counted as good"
    assert result.first_bad == "9.20.0"


@pytest.mark.parametrize("same", ["pass", "crash"])
def test_ends_that_agree_are_a_finding_and_nothing_between_is_probed(same: str) -> None:
    calls: list[str] = []

    def probe(candidate: str) -> str:
        calls.append(candidate)
        return same

    result = bisect(VERSIONS, probe)
    assert calls == [VERSIONS[0], VERSIONS[-1]]
    assert result.ends_agree
    assert not result.found
    assert (result.good_class, result.bad_class) == (same, same)
    assert result.to_dict()["ends_agree"] is True
    assert suggested_issue(result, axis="cudnn", case="x.py", pins={}) is None


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("error", "crash", "--good 9.13.0 gives error"),
        ("pass", "skip", "--bad 9.25.0 gives skip"),
    ],
)
def test_ends_that_cannot_anchor_are_refused(good: str, bad: str, message: str) -> None:
    calls: list[str] = []

    def probe(candidate: str) -> str:
        calls.append(candidate)
        return good if candidate == VERSIONS[0] else bad

    with pytest.raises(ConfigError, match=message):
        bisect(VERSIONS, probe)
    assert set(calls) <= {VERSIONS[0], VERSIONS[-1]}  # nothing in between was probed


def test_ends_whose_repeats_disagree_are_refused() -> None:
    runs = iter(["pass", "fail"])
    with pytest.raises(ConfigError, match=r"--good 9.13.0 gives pass, fail"):
        bisect(VERSIONS, lambda _c: next(runs), repeats=2)


def test_empty_range_is_refused() -> None:
    with pytest.raises(ConfigError, match="empty range"):
        bisect(["9.13.0", "9.13.0"], lambda _c: "pass")


def test_a_killed_bisect_resumes_from_what_it_recorded() -> None:
    """The first run dies after three probes; the second reads them back and re-runs none."""
    recorded: list[Probe] = []
    probe = step_at("9.22.0")
    calls: list[str] = []

    def dies_after_three(candidate: str) -> str:
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(candidate)
        return probe(candidate)

    with pytest.raises(KeyboardInterrupt):
        bisect(VERSIONS, dies_after_three, record=recorded.append)
    assert [p.candidate for p in recorded] == calls
    done = {p.candidate: Probe.from_dict(p.to_dict()) for p in recorded}  # through JSON shapes
    again: list[str] = []
    result = bisect(VERSIONS, step_at("9.22.0", calls=again), done=done)
    assert not set(again) & set(calls)
    assert result.first_bad == "9.22.0"
    assert [p.candidate for p in result.probes][:3] == calls
    fresh = bisect(VERSIONS, step_at("9.22.0"))
    assert [p.to_dict() for p in result.probes] == [p.to_dict() for p in fresh.probes]


def test_next_index_takes_the_middle_of_what_is_left() -> None:
    assert next_index(0, 10, set()) == 5
    assert next_index(0, 10, {5}) == 4
    assert next_index(0, 10, {4, 5}) == 6
    assert next_index(3, 4, set()) is None
    assert next_index(0, 3, {1, 2}) is None


def test_classify_names_what_it_skipped() -> None:
    runs = [Observation(outcome="skip", reason="no NVIDIA driver")]
    assert classify(runs, good_class="pass", bad_class="fail") == (
        Verdict.SKIP,
        "skipped: skip is neither good nor bad (no NVIDIA driver)",
    )


def test_suggested_issue_is_a_known_issue_entry(tmp_path: Path) -> None:
    result = bisect(VERSIONS, step_at("9.24.0"))
    issue = suggested_issue(
        result, axis="cudnn", case="26_*.ipynb", pins={"frontend": "1.27.0", "arch": "sm100"}
    )
    assert issue is not None
    (tmp_path / "ki.toml").write_text(issue)
    (loaded,) = load_known_issues(tmp_path / "ki.toml")  # the database's own reader takes it
    assert loaded.covers_case("26_layernorm.ipynb")
    assert issue.startswith(
        "# bisect over cudnn: last good 9.23.0 (pass), first bad 9.24.0 (crash)"
    )
    entry = tomllib.loads(issue)["issue"][0]
    assert entry["backend"] == ">=9.24.0"
    assert entry["archs"] == ["sm100"]
    assert entry["cases"] == ["26_*.ipynb"]
    assert entry["symptom"] == {"outcomes": ["crash"]}
    assert "9.24.0" in SpecifierSet(entry["backend"])
    assert "9.23.0" not in SpecifierSet(entry["backend"])
    assert suggested_issue(result, axis="frontend-commit", case="x", pins={}) is None


# --- candidates -------------------------------------------------------------------------------


def test_between_orders_by_version_and_leaves_out_pre_releases() -> None:
    listed = ["1.9.0", "1.27.0", "1.10.0", "1.26.0", "1.27.0rc1", "1.26.1", "1.11.0"]
    assert releases.between(listed, "1.9.0", "1.27.0", where="x") == [
        "1.9.0",
        "1.10.0",
        "1.11.0",
        "1.26.0",
        "1.26.1",
        "1.27.0",
    ]
    assert releases.between(listed, "1.26.1", "1.27.0rc1", where="x") == ["1.26.1", "1.27.0rc1"]
    assert releases.between(listed, "1.26.0", "1.27.0rc1", where="x")[::-1] == releases.between(
        listed, "1.27.0rc1", "1.26.0", where="x"
    )


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("1.26.0", "1.26.0", "empty range"),
        ("1.25.0", "1.27.0", "--good 1.25.0 is not a release in the wheelhouse"),
        ("1.26.0", "main", "--bad 'main' is not a version"),
    ],
)
def test_between_refuses_bad_ends(good: str, bad: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        releases.between(["1.26.0", "1.27.0"], good, bad, where="the wheelhouse")


def test_wheelhouse_versions(tmp_path: Path) -> None:
    for name in (
        "nvidia_cudnn_frontend-1.27.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "nvidia_cudnn_frontend-1.26.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "nvidia_cudnn_cu13-9.13.0.50-py3-none-manylinux_2_27_x86_64.whl",
        "not-a-wheel.whl",
    ):
        (tmp_path / name).touch()
    assert releases.wheelhouse_versions(tmp_path, "nvidia-cudnn-frontend") == ["1.26.0", "1.27.0"]
    assert releases.wheelhouse_versions(tmp_path, "nvidia-cudnn-cu13") == ["9.13.0.50"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository: c0 - c1 - merge(c2 on a branch) - c3, committed for real."""
    path = tmp_path / "repo"
    path.mkdir()

    def git(*args: str) -> str:
        env: Mapping[str, str] = {
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@e",
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
        }
        done = subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=True, env=env
        )
        return done.stdout.strip()

    git("init", "-q", "-b", "main")
    for name in ("c0", "c1"):
        git("commit", "-q", "--allow-empty", "-m", name)
        git("tag", name)
    git("checkout", "-q", "-b", "side")
    git("commit", "-q", "--allow-empty", "-m", "c2")
    git("tag", "c2")
    git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "-m", "merge", "side")
    git("tag", "merge")
    git("commit", "-q", "--allow-empty", "-m", "c3")
    git("tag", "c3")
    return path


def _sha(repo: Path, ref: str) -> str:
    cmd = ["git", "-C", str(repo), "rev-parse", ref]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def test_git_range_first_parent_and_all_commits(repo: Path) -> None:
    first = releases.git_range(repo, "c0", "c3")
    assert first == [_sha(repo, r) for r in ("c0", "c1", "merge", "c3")]
    every = releases.git_range(repo, "c0", "c3", all_commits=True)
    assert set(every) == set(first) | {_sha(repo, "c2")}
    assert every[0] == _sha(repo, "c0")
    assert every[-1] == _sha(repo, "c3")


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("c3", "c0", "--good c3 is not an ancestor of --bad c0"),
        ("c1", "c1", "empty range"),
        ("c1", "nope", "--bad 'nope' is not a commit"),
    ],
)
def test_git_range_refuses_bad_ends(repo: Path, good: str, bad: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        releases.git_range(repo, good, bad)
