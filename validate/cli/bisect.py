"""The `bisect` command: the first bad backend release, frontend release or frontend commit.

Each probe is a real `validate` of one cell and one case (workflow.run with the config of the
flags, narrowed to the candidate) in its own folder under the bisect folder; its RunOutcome is the
probe's observation (validate.out keeps what `validate` would have printed). The logic that picks
the probes and reads their outcomes is judge/bisect.py. bisect.json holds the candidates and every
probe made, so a killed bisect run again with the same --results continues where it stopped.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.cli import ENDS_AGREE_EXIT, EXIT_CODES, positive
from validate.cli.validate import add_validate_args, config_from_args
from validate.config import Selectors, ValidateConfig
from validate.env import releases
from validate.env.sources import BackendStore, backend_package
from validate.errors import ConfigError, ResultsLost, ValidateError
from validate.judge.bisect import (
    BisectResult,
    Observation,
    Probe,
    ProbeFn,
    bisect,
    folder_name,
    suggested_issue,
)
from validate.judge.speed import Thresholds, slower_class
from validate.model.outcome import Outcome
from validate.model.results import load_results, write_json

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from validate.model.results import CaseResult

__all__ = ["register"]

AXES: Final = ("cudnn", "frontend", "frontend-commit")
_FRONTEND: Final = "nvidia-cudnn-frontend"
_STATE: Final = "bisect.json"
_NO_ISSUES: Final = "no-known-issues.toml"
#: bisect's own table: 0-4 and 6 say what a bisect found; 5, 130 and 143 are the shared lines
#: (a bisect run again with the same --results continues where it stopped).
_EXIT_CODES: Final = "\n".join(
    [
        "exit codes:",
        "  0    the boundary was found: first bad and last good are adjacent candidates",
        "  1    no exact boundary: skipped (error/skip/flaky) candidates leave it open; they are named",
        "  2    bad input, one line on stderr: a flag, an unknown version or case, an empty range, an",
        "       end that plans no cell (all found before any probe); an end that gives error or skip,",
        "       or not the same outcome in every repeat",
        "  3/4  never: an environment that cannot be built is that probe's `error` (skipped)",
        *(line for line in EXIT_CODES.splitlines() if line.startswith("  5 ")),
        f"  {ENDS_AGREE_EXIT}    both ends gave the same outcome: the range holds no change to find",
        "       (a finding, not bad input; nothing between the ends was probed)",
        *(line for line in EXIT_CODES.splitlines() if line.startswith(("  130", "  143"))),
    ]
)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `bisect` command."""
    parser = subparsers.add_parser(
        "bisect",
        help="find the first bad backend release, frontend release or frontend commit",
        description=(
            "Probe one case in one cell at releases (or commits) between --good and --bad until "
            "the first one showing --bad's outcome class is found. Takes validate's flags for "
            "the fixed pins; each probe is a validate run with its own results folder."
        ),
        epilog=_EXIT_CODES,
    )
    group = parser.add_argument_group("bisect")
    group.add_argument("--axis", required=True, choices=AXES, help="what to bisect over")
    group.add_argument("--good", required=True, metavar="X", help="version or commit: good end")
    group.add_argument("--bad", required=True, metavar="Y", help="version or commit: bad end")
    group.add_argument(
        "--repeats",
        type=positive(int, 1, 100),
        default=1,
        metavar="N",
        help="run each probe N times; a probe whose runs disagree is reported and skipped",
    )
    group.add_argument(
        "--slower-than",
        type=positive(float, 1.0),
        metavar="RATIO",
        help="bisect a slowdown instead of an outcome: bad = the --unit of the case at least "
        "RATIO times (and --slower-min-s seconds) slower than at --good, by the minimum of "
        "--speed-repeats runs alone per probe",
    )
    group.add_argument(
        "--unit",
        metavar="UNIT",
        help="with --slower-than: the timed unit, e.g. 'cell 7' or a script's CUDNN_MATRIX_TIME name",
    )
    group.add_argument(
        "--all-commits",
        action="store_true",
        help="frontend-commit: every commit of good..bad, not only the first-parent ones",
    )
    add_validate_args(parser)
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    if len(args.case_names) != 1:
        msg = "bisect: name exactly one case with --case NAME"
        raise ConfigError(msg)
    if (args.slower_than is None) != (args.unit is None):
        msg = "bisect: --slower-than RATIO and --unit UNIT go together"
        raise ConfigError(msg)
    if args.slower_than is not None and args.repeats != 1:
        msg = "bisect --slower-than: each probe runs --speed-repeats times (not --repeats)"
        raise ConfigError(msg)
    args.resume = False  # a bisect always continues its folder; each probe resumes its own
    case = args.case_names[0]
    if args.results is None:
        args.results = (
            Path.cwd()
            / "reports"
            / "bisect"
            / folder_name(case, args.axis, args.good, args.bad, args.unit)
        )
    base: ValidateConfig = config_from_args(args)
    _check_pins(base, args)
    _check_case(base)
    folder = base.results_dir
    assert folder is not None
    state = _load_state(folder / _STATE, case=case, axis=args.axis, good=args.good, bad=args.bad)
    if state.get("candidates"):
        candidates, source = list(state["candidates"]), str(state["source"])
    else:
        candidates, source = _candidates(base, args)
    # all that can be checked before the first probe: each end plans its one cell, and the
    # versions each end would install are ones their source has
    ends = (candidates[0], candidates[-1])
    for end in ends:
        _check_one_cell(_probe_config(base, args, end, folder), args.axis, end)
    if args.axis != "frontend-commit":  # a commit's wheel is built by its probe
        from validate.env.versions import resolve_versions

        for end in ends:
            resolve_versions(_probe_config(base, args, end, folder))
    state.update(
        case=case, axis=args.axis, good=args.good, bad=args.bad, repeats=args.repeats,
        source=source, candidates=candidates, probes=state.get("probes", []),
    )  # fmt: skip
    if args.slower_than is not None:  # what a speed bug report matches a slowdown's bisect by
        state.update(
            unit=args.unit,
            slower_than=args.slower_than,
            slower_min_s=base.slower_min_s,
            speed_repeats=base.speed_repeats,
            pins={a: v[0] for a, v in base.selectors.values.items() if len(v) == 1},
        )
    write_json(folder / _STATE, state)
    done = {p.candidate: p for p in (Probe.from_dict(d) for d in state["probes"])}
    print(
        f"bisect {case} over {args.axis}: {len(candidates) - 2} candidates between "
        f"{args.good} and {args.bad} ({source}); {len(done)} probes read back from {folder}"
    )

    def record(probe: Probe) -> None:
        state["probes"].append(probe.to_dict())
        write_json(folder / _STATE, state)
        print(f"probe {_short(probe.candidate)}: {', '.join(probe.outcomes)} -> {probe.verdict}")

    if args.slower_than is None:
        prober, repeats = _prober(base, args, folder), args.repeats
    else:  # each probe is its own --speed-repeats runs, judged by their minimum
        prober, repeats = _speed_prober(base, args, folder, candidates[0]), 1
    result = bisect(candidates, prober, repeats=repeats, done=done, record=record)
    pins = {axis: vals[0] for axis, vals in base.selectors.values.items() if len(vals) == 1}
    issue = suggested_issue(result, axis=args.axis, case=case, pins=pins)
    write_json(folder / _STATE, {**state, "result": result.to_dict(), "suggested_issue": issue})
    print(render(result, args.axis, issue))
    print(f"bisect: {folder / _STATE}")
    if result.ends_agree:
        return ENDS_AGREE_EXIT
    return 0 if result.found else 1


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "bisect"


def _short(candidate: str) -> str:
    return candidate[:12] if re.fullmatch(r"[0-9a-f]{40}", candidate) else candidate


def _check_pins(base: ValidateConfig, args: argparse.Namespace) -> None:
    """The bisected axis comes from --good/--bad only; its source flags must not fight them."""
    values = base.selectors.values
    pinned = {"cudnn": "cudnn", "frontend": "frontend"}.get(args.axis)
    if pinned and pinned in values:
        msg = f"bisect: --{pinned} is the bisected axis; give its ends with --good/--bad only"
        raise ConfigError(msg)
    if args.axis == "cudnn" and base.backend_source:
        msg = "bisect --axis cudnn: --backend-source fights the candidates; use --backend-store DIR"
        raise ConfigError(msg)
    if args.axis == "frontend" and base.frontend_source:
        msg = "bisect --axis frontend: --frontend-source fights the candidates; leave it out"
        raise ConfigError(msg)
    if args.axis == "frontend-commit" and (not base.frontend_source or "@" in base.frontend_source):
        msg = "bisect --axis frontend-commit: give the checkout as --frontend-source CHECKOUT (no @REF)"
        raise ConfigError(msg)


def _candidates(base: ValidateConfig, args: argparse.Namespace) -> tuple[list[str], str]:
    """[good, ..., bad] and where they were listed from."""
    if args.axis == "frontend-commit":
        assert base.frontend_source is not None
        checkout = Path(base.frontend_source)
        commits = releases.git_range(checkout, args.good, args.bad, all_commits=args.all_commits)
        parents = "all commits" if args.all_commits else "first-parent commits"
        return commits, f"{parents} of {checkout}"
    if args.axis == "cudnn":
        cuda = base.selectors.values.get("cuda", ())
        if len(cuda) != 1:
            msg = "bisect --axis cudnn: pin one --cuda (it picks nvidia-cudnn-cu12 or -cu13)"
            raise ConfigError(msg)
        package = backend_package(int(cuda[0].split(".")[0]))
    else:
        package = _FRONTEND
    if args.axis == "cudnn" and base.backend_store is not None:
        major = int(package.removeprefix("nvidia-cudnn-cu"))
        store = BackendStore(base.backend_store)
        where = f"backend store {base.backend_store}"
        versions = [e.version for e in store.entries if e.cuda_major in (None, major)]
    elif base.wheelhouse is not None:
        where = f"{package} wheels in {base.wheelhouse}"
        versions = releases.wheelhouse_versions(base.wheelhouse, package)
    else:
        where = f"{package} on PyPI"
        versions = releases.index_versions(package)
    return releases.between(versions, args.good, args.bad, where=where), where


def _load_state(path: Path, **ends: str) -> dict[str, Any]:
    """bisect.json of a bisect to continue ({} for a new one); ConfigError when it is another's."""
    if not path.is_file():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"bisect: {path} is unreadable ({exc}); remove it or pick another --results"
        raise ConfigError(msg) from exc
    other = {k: state.get(k) for k in ends if state.get(k) != ends[k]}
    if not isinstance(state, dict) or other:
        msg = f"bisect: {path} holds another bisect ({other}); pick another --results"
        raise ConfigError(msg)
    return state


def _probe_config(
    base: ValidateConfig, args: argparse.Namespace, candidate: str, run_dir: Path
) -> ValidateConfig:
    """The validate config of one probe: one cell (the candidate on the bisected axis), one case,
    its own folder, and no known issues (the bisect judges raw outcomes, not xfail)."""
    values = dict(base.selectors.values)
    changes: dict[str, Any] = {}
    if args.axis == "frontend-commit":
        changes["frontend_source"] = f"{base.frontend_source}@{candidate}"
    else:
        values[args.axis] = (candidate,)  # with --backend-store, validate takes its folder
    assert base.results_dir is not None
    no_issues = base.results_dir / _NO_ISSUES
    if not no_issues.is_file():
        no_issues.write_text("# bisect: raw outcomes, no known issue applied\n", encoding="utf-8")
    return replace(
        base,
        selectors=Selectors(
            matrix=base.selectors.matrix, rules=base.selectors.rules, values=values
        ),
        results_dir=run_dir,
        resume=(run_dir / "results.jsonl").is_file(),
        known_issues=no_issues,
        **changes,
    )


def _check_case(config: ValidateConfig) -> None:
    """--case names a case the probes will find: a file case by its name; a pytest node id of
    --tests is the one test each probe's pytest selects (an exact id whose file is in the suite;
    its collection finds the rest); a C++ TEST_CASE is found by its project's build (each probe
    builds the --cpp project against its cell's backend and runs that one TEST_CASE,
    execute/catch2_suite.py)."""
    from validate.workflow import cases_stage

    cases_stage(config)  # CaseError: `--case X: matches none of the N cases (...)`, a glob...


def _check_one_cell(config: ValidateConfig, axis: str, end: str) -> None:
    """The pins must plan exactly one cell (and not prune it) at each end, else the probes mean
    nothing."""
    from validate.workflow import plan_stage

    plan = plan_stage(config)
    if len(plan.planned) != 1:
        why = "; ".join(f"{c.id}: {r}" for c, r in plan.pruned[:3]) if not plan.planned else ""
        msg = (
            f"bisect: the pins plan {len(plan.planned)} cells, not one, at {axis} {_short(end)} "
            + (f"(pruned: {why})" if why else "")
            + "; pin every axis (--cuda, --driver, --arch, and --cudnn/--frontend for the fixed one)"
        )
        raise ConfigError(msg)


def _prober(base: ValidateConfig, args: argparse.Namespace, folder: Path) -> ProbeFn:
    """probe(candidate): the next repeat of a validate of that candidate, as an Observation."""
    from validate.workflow import describe, run

    repeat: dict[str, int] = {}

    def probe(candidate: str) -> Observation:
        repeat[candidate] = repeat.get(candidate, 0) + 1
        run_dir = folder / "probes" / _slug(candidate) / f"r{repeat[candidate]}"
        config = _probe_config(base, args, candidate, run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        print(f"+ validate {_short(candidate)} -> {run_dir}", file=sys.stderr)
        try:
            outcome = run(config)
        except (ConfigError, ResultsLost):  # bad input, or a disk that is full: stop bisecting
            raise
        except ValidateError as exc:  # an environment that could not be made: error, not bad
            (run_dir / "validate.out").write_text(f"{exc}\n", encoding="utf-8")
            return Observation(outcome="error", reason=str(exc), folder=str(run_dir))
        (run_dir / "validate.out").write_text(describe(outcome) + "\n", encoding="utf-8")
        return _observation(outcome.results, outcome.folder, args.case_names[0])

    return probe


def _speed_prober(
    base: ValidateConfig, args: argparse.Namespace, folder: Path, good: str
) -> ProbeFn:
    """probe(candidate): `slower` or `not slower` (judge/speed.py slower_class) by the minimum
    of --speed-repeats validate runs of the candidate, each the only case of its run (alone),
    against the good end's minimum. The good end's runs are read back from their folders where
    a resumed bisect did not probe it again."""
    plain = _prober(base, args, folder)
    thresholds = Thresholds(ratio=args.slower_than, min_s=base.slower_min_s)
    seen: dict[str, tuple[list[float], list[Observation]]] = {}

    def times(candidate: str) -> tuple[list[float], list[Observation]]:
        if candidate not in seen:
            runs = [
                got if isinstance(got, Observation) else Observation(outcome=got)
                for got in (plain(candidate) for _ in range(max(1, base.speed_repeats)))
            ]
            got: list[float] = []
            for run in runs:
                results = load_results([Path(run.folder)]) if run.folder else []
                got += [
                    r.units[args.unit]
                    for r in results
                    if r.outcome is Outcome.PASS and args.unit in r.units
                ]
            seen[candidate] = got, runs
        return seen[candidate]

    def probe(candidate: str) -> Observation:
        seconds, runs = times(candidate)
        outcome, reason = slower_class(args.unit, seconds, times(good)[0], thresholds)
        if outcome == "error" and runs:
            reason += f" ({', '.join(dict.fromkeys(r.outcome for r in runs))})"
        return Observation(outcome=outcome, reason=reason, folder=runs[0].folder if runs else "")

    return probe


def _observation(latest: Sequence[CaseResult], run_dir: Path, case: str = "") -> Observation:
    """What one probe saw in its results (the latest per cell x case): its one result, or the
    result of `case` among many (a pytest test id among its suite's tests, issue #27), else
    every result's outcome, joined."""
    results = [r for r in latest if r.case == case] or list(latest)
    if not results:
        return Observation(outcome="error", reason="no result recorded", folder=str(run_dir))
    if len(results) == 1:
        only = results[0]
        return Observation(outcome=str(only.outcome), reason=only.reason, folder=str(run_dir))
    joined = ", ".join(sorted(f"{r.case}={r.outcome}" for r in results))
    reason = next((r.reason for r in results if r.reason), "")
    return Observation(outcome=joined, reason=reason, folder=str(run_dir))


def render(result: BisectResult, axis: str, issue: str | None) -> str:
    """The probes table, each probe's evidence, the boundary and the suggested known issue."""
    from tabulate import tabulate

    rows = [
        [
            _short(p.candidate),
            ", ".join(p.outcomes),
            str(p.verdict),
            str(Path(p.observations[0].folder).parent) if p.observations[0].folder else "",
        ]
        for p in sorted(result.probes, key=lambda p: result.candidates.index(p.candidate))
    ]
    head = (
        f"both ends give {result.good_class}: no change of outcome over the range"
        if result.ends_agree
        else f"bad = {result.bad_class} (the outcome at --bad); good = anything else but "
        f"error/skip (--good gave {result.good_class})"
    )
    lines = [
        head,
        str(
            tabulate(  # candidates as declared: "13.0" is no float, a sha like "1234e567" no 1.2e570
                rows,
                headers=[axis, "outcomes", "class", "results"],
                tablefmt="github",
                disable_numparse=True,
            )
        ),
        "evidence:",
    ]
    for p in result.probes:
        reasons = "; ".join(
            dict.fromkeys(
                o.reason.strip().splitlines()[0] for o in p.observations if o.reason.strip()
            )
        )
        note = f" [{p.note}]" if p.note else ""
        lines.append(f"  {_short(p.candidate)}: {reasons or '(no reason line)'}{note}")
    if result.ends_agree:
        lines.append(
            f"no change to find: --good {_short(result.last_good)} and --bad "
            f"{_short(result.first_bad)} both give {result.good_class}, so nothing between "
            f"them was probed (exit {ENDS_AGREE_EXIT}); pick ends with different outcomes"
        )
    elif result.found:
        lines += [f"first bad: {result.first_bad}", f"last good: {result.last_good}"]
    else:
        untested = ", ".join(_short(c) for c in result.unresolved)
        lines.append(
            f"no exact boundary: the first bad is one of {untested} (untestable, skipped) or "
            f"{result.first_bad}; last good {result.last_good}"
        )
    if issue is not None:
        lines += ["suggested known issue (matrix/known_issues.toml):", issue]
    return "\n".join(lines)
