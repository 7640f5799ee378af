"""Known-issue check: ranges and archs (packaging specifiers), verdicts, and the checked TOML loader."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from packaging.specifiers import SpecifierSet

from validate.errors import MatrixError
from validate.judge.known_issues import (
    KnownIssue,
    Symptom,
    apply_known_issues,
    case_matches,
    load_known_issues,
)
from validate.model.outcome import Outcome
from validate.model.results import CaseResult

if TYPE_CHECKING:
    from pathlib import Path

KI = KnownIssue(
    id="KI-1",
    title="stale pointers",
    backend=SpecifierSet(">=9.24,<9.25"),
    frontend=SpecifierSet(">=1.27"),
    archs=frozenset({"sm100", "sm120"}),
    cases=("26_*.ipynb", "repro_fusion_uid[*]"),
    symptom=Symptom(outcomes=frozenset({Outcome.CRASH, Outcome.FAIL})),
)
NB26 = "26_layernorm_forward_training_and_backward_with_relu_bitmask.ipynb"


def _result(
    outcome: Outcome,
    cudnn: str = "9.24.0.43",
    frontend: str = "1.27.0",
    arch: str = "sm100",
    case: str = NB26,
    reason: str = "",
) -> CaseResult:
    cell = {"cudnn": cudnn, "frontend": frontend, "arch": arch, "cuda": "13.0", "driver": "580"}
    return CaseResult(case=case, outcome=outcome, reason=reason, cell=cell)


@pytest.mark.parametrize(
    ("cudnn", "frontend", "arch", "why"),
    [
        ("9.24.0.43", "1.27.0", "sm100", None),
        ("9.24.1.1", "1.32.0", "sm120", None),
        ("9.24", "1.27", "sm100", None),
        ("9.23.2.1", "1.27.0", "sm100", "backend 9.23.2.1 not in <9.25,>=9.24"),
        ("9.25.0.15", "1.27.0", "sm100", "backend 9.25.0.15 not in <9.25,>=9.24"),
        ("9.24.0.43", "1.26.0", "sm100", "frontend 1.26.0 not in >=1.27"),
        ("9.24.0.43", "1.27.0", "sm90", "arch sm90 not in sm100, sm120"),
        ("9.24.0.43", "1.27.0", "", "arch unknown not in sm100, sm120"),
        ("", "1.27.0", "sm100", "backend unknown cannot be compared with <9.25,>=9.24"),
    ],
)
def test_range(cudnn: str, frontend: str, arch: str, why: str | None) -> None:
    assert KI.out_of_range({"backend": cudnn, "frontend": frontend, "arch": arch}) == why


@pytest.mark.parametrize(
    ("result", "check_backend", "hit"),
    [
        (_result(Outcome.FAIL), True, True),
        (_result(Outcome.PASS, arch="SM_100"), True, True),  # the arch as a host may spell it
        (_result(Outcome.FAIL, case="27_other.ipynb"), True, False),
        (_result(Outcome.FAIL, cudnn="9.25.1.1"), True, False),
        (_result(Outcome.FAIL, cudnn="9.25.1.1"), False, True),  # the table's "fixed in" check
        (_result(Outcome.FAIL, cudnn="9.25.1.1", frontend="1.26.0"), False, False),
        (_result(Outcome.FAIL, arch="sm90"), False, False),
    ],
)
def test_matches_is_case_and_range(result: CaseResult, *, check_backend: bool, hit: bool) -> None:
    """The one matching rule, used by the judge and by the report's table."""
    assert KI.matches(result, check_backend=check_backend) is hit


@pytest.mark.parametrize(
    ("spec", "version", "inside"),
    [
        # PEP 440: "<V" excludes V's own pre-releases, so a 9.26 dev wheel is not "< 9.26" ...
        ("<9.26", "9.26.0.33.dev63203437", False),
        # ... but a range that admits pre-releases holds it (contains(prereleases=True))
        (">=9.26.0.dev0,<9.27", "9.26.0.33.dev63203437", True),
        ("==9.26.0.51", "9.26.0.51", True),
        ("==9.26.0.51", "9.26.1.1", False),
        (">=9.18.0,<9.21", "9.20.0.48", True),
        (">=9.18.0,<9.21", "9.21.0.82", False),
        ("", "8.9.7.29", True),
    ],
)
def test_backend_specifiers(spec: str, version: str, inside: bool) -> None:
    ki = KnownIssue(
        id="KI-x",
        title="t",
        backend=SpecifierSet(spec),
        frontend=SpecifierSet(""),
        archs=frozenset(),
        cases=("*",),
        symptom=Symptom(outcomes=frozenset({Outcome.FAIL})),
    )
    assert (ki.out_of_range({"backend": version, "arch": "sm75"}) is None) is inside


@pytest.mark.parametrize(
    ("case", "pattern", "hit"),
    [
        (NB26, "26_*.ipynb", True),
        ("samples/python/" + NB26, "26_*.ipynb", True),
        ("repro_fusion_uid[graph-pygraph]", "repro_fusion_uid[*]", True),
        ("repro_fusion_uid[backward]", "repro_fusion_uid[backward]", True),
        ("repro_fusion_uid[backward]", "repro_fusion_uid[graph-graph]", False),
        ("51_sdpa_backward.ipynb", "5[01]_*.ipynb", True),
        ("52_sdpa_with_paged_caches.ipynb", "5[01]_*.ipynb", False),
        ("27_adaptive_layernorm.ipynb", "26_*.ipynb", False),
    ],
)
def test_case_globs(case: str, pattern: str, hit: bool) -> None:
    assert case_matches(case, pattern) is hit


@pytest.mark.parametrize(
    ("result", "outcome", "known", "note"),
    [
        # declared issue reproduced inside its range -> xfail
        (_result(Outcome.CRASH, reason="DeadKernelError"), Outcome.XFAIL, "KI-1", ""),
        (_result(Outcome.FAIL, case="repro_fusion_uid[graph-graph]"), Outcome.XFAIL, "KI-1", ""),
        # declared issue did not reproduce inside its range -> xpass
        (_result(Outcome.PASS), Outcome.XPASS, "KI-1", ""),
        # a pass outside the range is just a pass
        (_result(Outcome.PASS, cudnn="9.25.1.1"), Outcome.PASS, None, ""),
        # the symptom outside the declared range stays a failure, flagged
        (
            _result(Outcome.CRASH, cudnn="9.23.2.1"),
            Outcome.CRASH,
            None,
            "KI-1 reproduces outside its declared range (backend 9.23.2.1 not in <9.25,>=9.24)",
        ),
        (
            _result(Outcome.FAIL, arch="sm90"),
            Outcome.FAIL,
            None,
            "KI-1 reproduces outside its declared range (arch sm90 not in sm100, sm120)",
        ),
        # a symptom the issue does not declare is a regression, with a hint
        (
            _result(Outcome.TIMEOUT),
            Outcome.TIMEOUT,
            None,
            "KI-1 is declared here but the symptom differs (expected crash|fail)",
        ),
        # a case no issue covers: unchanged
        (_result(Outcome.FAIL, case="20_layernorm_forward.ipynb"), Outcome.FAIL, None, ""),
        # skip/error are never judged
        (_result(Outcome.SKIP), Outcome.SKIP, None, ""),
        (_result(Outcome.ERROR), Outcome.ERROR, None, ""),
    ],
)
def test_verdicts(result: CaseResult, outcome: Outcome, known: str | None, note: str) -> None:
    (judged,) = apply_known_issues([result], [KI])
    assert (judged.outcome, judged.known_issue, judged.ki_note) == (outcome, known, note)


def test_xpass_reason_and_idempotence() -> None:
    (once,) = apply_known_issues([_result(Outcome.PASS)], [KI])
    assert once.reason == "KI-1 did not reproduce: fixed?"
    assert apply_known_issues([once], [KI]) == [once]


def test_symptom_regex_on_reason_and_exception() -> None:
    ki = KnownIssue(
        id="KI-7",
        title="segfault",
        backend=SpecifierSet("==9.26.0.51"),
        frontend=SpecifierSet(""),
        archs=frozenset({"sm90"}),
        cases=("*",),
        symptom=Symptom(
            outcomes=frozenset({Outcome.CRASH}), match=re.compile("SIGSEGV|Kernel died")
        ),
    )
    base = _result(Outcome.CRASH, cudnn="9.26.0.51", arch="sm90")
    by_signal = base.with_(signal="SIGSEGV")
    by_exc = base.with_(exception={"ename": "DeadKernelError", "evalue": "Kernel died"})
    other = base.with_(signal="SIGABRT")
    judged = apply_known_issues([by_signal, by_exc, other], [ki])
    assert [r.outcome for r in judged] == [Outcome.XFAIL, Outcome.XFAIL, Outcome.CRASH]


def test_embedded_database_loads() -> None:
    issues = load_known_issues()
    ids = [ki.id for ki in issues]
    assert len(ids) == len(set(ids)) >= 6
    ki1 = next(ki for ki in issues if ki.id == "KI-1")
    assert ki1.covers_case(NB26)
    assert ki1.fixed_in == "9.25.0"
    assert "lower bound never stated" in ki1.note.lower()


GOOD = """
[[issue]]
id = "KI-1"
title = "ok"
backend = ">=9.24,<9.25"
cases = ["26_*.ipynb"]
symptom = { outcomes = ["crash"] }
"""

BAD = """
[[issue]]
id = "KI-1"
title = "bad range"
backend = ">=9.24,<nine"
cases = ["26_*.ipynb"]
symptom = { outcomes = ["crash"] }

[[issue]]
id = "KI-2"
title = "bad arch and outcome"
backend = "<9.26"
archs = ["hopper"]
cases = ["*"]
symptom = { outcomes = ["exploded"], match = "(" }

[[issue]]
id = "KI-2"
title = "duplicate id, unknown key, missing cases"
backend = "<9.26"
colour = "red"
symptom = { outcomes = ["fail"] }
"""


def test_loader_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "ki.toml"
    path.write_text(GOOD, encoding="utf-8")
    (ki,) = load_known_issues(path)
    assert (ki.id, str(ki.backend), ki.archs, ki.frontend) == (
        "KI-1",
        "<9.25,>=9.24",
        frozenset(),
        SpecifierSet(""),
    )


def test_loader_reports_every_bad_entry_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ki.toml"
    path.write_text(BAD, encoding="utf-8")
    with pytest.raises(MatrixError) as info:
        load_known_issues(path)
    text = str(info.value)
    assert "\n" not in text
    for expected in (
        f"{path}:5: issue[0].backend: bad version specifier '>=9.24,<nine'",
        f"{path}:13: issue[1].archs: bad arch 'hopper'",
        "issue[1].symptom.outcomes: 'exploded' is not one of",
        "issue[1].symptom.match: bad regex '('",
        f"{path}:21: issue[2].colour: unknown key",
        f"{path}:18: issue[2].id: duplicate id 'KI-2'",
        "issue[2].cases: missing required key",
    ):
        assert expected in text
    assert info.value.return_code == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[issue]\n", "malformed TOML"),
        ("[other]\nx = 1\n", "other: unknown top-level key"),
    ],
)
def test_loader_rejects_files(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "ki.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MatrixError, match=expected):
        load_known_issues(path)


def test_loader_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="cannot read known-issues file"):
        load_known_issues(tmp_path / "absent.toml")


def _fnmatch_reference(case: str, pattern: str) -> bool:
    """What a case glob means (case_matches' doc), from fnmatch itself: the whole name or its
    file-name form, with `[`/`]` read as a set or taken literally."""
    from fnmatch import fnmatchcase

    file, sep, rest = case.partition("::")
    literal = re.sub(r"([\[\]])", r"[\1]", pattern)
    names = (case, file.rsplit("/", 1)[-1] + sep + rest)
    return any(fnmatchcase(n, pattern) or fnmatchcase(n, literal) for n in names)


def test_case_matches_gives_fnmatchs_answer_for_random_patterns_and_names() -> None:
    """The literal-text shortcut (`_needles`) only ever says no where fnmatch says no: 15,000
    random pairs, names made from their patterns (so that many match) and names at random, over
    an alphabet with every glob character, unmatched brackets, `!` sets, `/` and `::`."""
    import random

    rng = random.Random(20261207)
    pieces = [
        "*",
        "?",
        "[",
        "]",
        "[!a]",
        "[a-c]",
        "[]a]",
        "a",
        "b",
        "c",
        "::",
        "/",
        ".py",
        "_",
        "!",
    ]
    fill = ["a", "b", "c", "[", "]", "/", "::", ".py", "_", "!", "x"]
    pairs = hits = 0
    for _ in range(5_000):
        pattern = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 7)))
        made = "".join(  # the pattern with each wildcard replaced by text it may match
            "".join(rng.choice(fill) for _ in range(rng.randint(0, 2))) if ch == "*" else
            rng.choice(fill) if ch == "?" else ch
            for ch in pattern
        )  # fmt: skip
        other = "".join(rng.choice(fill) for _ in range(rng.randint(0, 8)))
        for case in (made, other, "dir/" + made):
            want = _fnmatch_reference(case, pattern)
            assert case_matches(case, pattern) is want, (case, pattern)
            pairs += 1
            hits += want
    assert pairs == 15_000
    assert hits > 1_500, hits  # the pairs that match are many: the shortcut was put to the test
