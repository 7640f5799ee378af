"""Shards: --shard i/n splits (cell x case) units by expected duration, longest first, the same way
every time; `report` merges the shards and refuses two inputs that disagree on one cell x case."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli

from validate.cli import main
from validate.plan.shard import ShardSpec, assign, expected, lpt_bound

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"


@pytest.fixture(autouse=True)
def _fresh_log_handler() -> Iterator[None]:
    """cli.main installs a stderr handler once; drop it so the next test's capsys stream is used."""
    yield
    logger = logging.getLogger("validate")
    for handler in [h for h in logger.handlers if h.get_name() == "cudnn-matrix"]:
        logger.removeHandler(handler)


# two cells of two environments (--env current: no wheel is installed; on a host without the pinned
# backend every case is an `error`, which is a result all the same, stored like any other)
CELLS = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0,1.32.0", "--cuda", "13.0"]
CELLS += ["--driver", "580", "--arch", "sm90", "--env", "current"]
CASES = ["pass_script.py", "fail_exit1.py", "slow_pass.py", "exit3.py"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("0/2", "got 0 of 2"),
        ("3/2", "got 3 of 2"),
        ("1/0", "got 1 of 0"),
        ("abc", "expected I/N"),
        ("1/2/3", "expected I/N"),
        ("1.5/2", "expected I/N"),
    ],
)
def test_bad_shard_is_one_line_exit_2(text: str, shown: str, tmp_path: Path) -> None:
    proc = cli("validate", "--shard", text, "--results", str(tmp_path), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "argument --shard" in proc.stderr
    assert shown in proc.stderr
    assert not (tmp_path / "run.json").exists()


def test_shard_spec_round_trips() -> None:
    assert str(ShardSpec.parse(" 2/4 ")) == "2/4"
    assert ShardSpec.parse("1/1") == ShardSpec(index=1, total=1)


def test_assign_is_longest_first_and_covers_every_unit_once() -> None:
    units = [(f"c{c}", f"case{k}") for c in range(3) for k in range(5)]
    durations = {f"case{k}": float(10 - 2 * k) for k in range(5)}  # 10, 8, 6, 4, 2 s
    shards = assign(units, durations, 4)
    flat = [u for shard in shards for u in shard]
    assert sorted(flat) == sorted(units)  # a partition: nothing lost, nothing twice
    loads = [sum(expected(s, durations)) for s in shards]
    assert loads == [24.0, 22.0, 22.0, 22.0]  # 90 s over 4: LPT reaches the mean bound here
    assert max(loads) <= lpt_bound(expected(units, durations), 4) * (4 / 3)
    # the same input gives the same shards, and each keeps the given order of its units
    assert assign(units, durations, 4) == shards
    assert all(s == sorted(s, key=units.index) for s in shards)


def test_unknown_durations_count_as_the_mean_and_none_known_balances_by_count() -> None:
    units = [("c", "long"), ("c", "new1"), ("c", "new2"), ("c", "short")]
    assert expected(units, {"long": 9.0, "short": 1.0}) == [9.0, 5.0, 5.0, 1.0]
    counts = [len(s) for s in assign([("c", f"x{i}") for i in range(10)], {}, 3)]
    assert counts == [4, 3, 3]


def test_more_shards_than_units_leaves_empty_shards() -> None:
    shards = assign([("c", "a")], {}, 3)
    assert shards == [[("c", "a")], [], []]


def _validate(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The run's environments in a cache beside its folder (the whole run's and the shards' one),
    never the user's (issue #36: without --cache-dir this built two venvs in ~/.cache)."""
    argv = ["validate", *CELLS, "--cases", str(SCRIPTS)]
    argv += ["--cache-dir", str(run_dir.parent / "cache")]
    for case in CASES:
        argv += ["--case", case]
    return cli(*argv, "--results", str(run_dir), *extra, cwd=run_dir.parent, timeout=300)


def _outcomes(run_dir: Path) -> dict[tuple[str, str], str]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return {(d["cell_id"], d["case"]): d["outcome"] for d in map(json.loads, lines)}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], Path]:
    """The same matrix run whole and in 3 shards, with one durations file for all of them."""
    root = tmp_path_factory.mktemp("shards")
    durations = root / "durations.json"
    durations.write_text(json.dumps({"slow_pass.py": 6.0, "exit3.py": 3.0, "pass_script.py": 2.0}))
    whole = root / "whole"
    assert _validate(whole, "--durations", str(durations)).returncode in (0, 1)
    shards = []
    for i in (1, 2, 3):
        run_dir = root / f"shard{i}"
        proc = _validate(run_dir, "--shard", f"{i}/3", "--durations", str(durations))
        assert proc.returncode in (0, 1), proc.stderr
        shards.append(run_dir)
    return whole, shards, durations


def test_shards_partition_the_run_and_record_it(
    sharded: tuple[Path, list[Path], Path],
) -> None:
    whole, shards, durations = sharded
    parts = [_outcomes(s) for s in shards]
    all_units = set(_outcomes(whole))
    assert len(all_units) == 2 * len(CASES)
    assert set().union(*parts) == all_units
    assert sum(len(p) for p in parts) == len(all_units)  # no unit in two shards
    metas = [json.loads((s / "run.json").read_text()) for s in shards]
    assert [m["shard"]["index"] for m in metas] == [1, 2, 3]
    assert {m["shard"]["total"] for m in metas} == {3}
    assert [m["shard"]["units"] for m in metas] == [len(p) for p in parts]
    assert {m["shard"]["durations"] for m in metas} == {str(durations)}
    assert len({m["shard"]["durations_sha256"] for m in metas}) == 1
    # 2 x (6 + 3 + 2 + mean 11/3) = 29.3 s over 3 shards; LPT puts the two 6 s cases apart
    loads = sorted(m["shard"]["expected_s"] for m in metas)
    assert loads[-1] == metas[0]["shard"]["expected_makespan_s"]
    assert loads[-1] - loads[0] <= 6.0
    assert all("finished_at" in m and m["planned"] for m in metas)  # each a complete run folder


def test_a_shard_is_the_same_every_time(sharded: tuple[Path, list[Path], Path]) -> None:
    _, shards, durations = sharded
    again = shards[0].parent / "again"
    assert _validate(again, "--shard", "1/3", "--durations", str(durations)).returncode in (0, 1)
    assert set(_outcomes(again)) == set(_outcomes(shards[0]))


def test_report_merges_shards_as_the_whole_run(
    sharded: tuple[Path, list[Path], Path], tmp_path: Path
) -> None:
    whole, shards, _ = sharded
    merged_json, whole_json = tmp_path / "merged.json", tmp_path / "whole.json"
    argv = ["report", "--format", "json"]
    rc_merged = main([*argv, *_results(shards), "--out", str(merged_json)])
    rc_whole = main([*argv, *_results([whole]), "--out", str(whole_json)])
    assert rc_merged == rc_whole

    def cells(path: Path) -> set[tuple[str, str, str]]:
        data = json.loads(path.read_text())
        return {(r["cell_id"], r["case"], r["outcome"]) for r in data["results"]}

    assert cells(merged_json) == cells(whole_json)
    assert len(cells(merged_json)) == 2 * len(CASES)


def _results(paths: list[Path]) -> list[str]:
    return [arg for p in paths for arg in ("--results", str(p))]


def _rewrite(src: Path, dst: Path, outcome: str, *, started_at: str) -> Path:
    """A copy of run `src` whose every result has another outcome (re-signed with its own key)."""
    from validate.model.outcome import Outcome
    from validate.model.results import ResultStore, load_results

    dst.mkdir()
    store = ResultStore(dst / "results.jsonl")
    for result in load_results([src]):
        store.append(result.with_(outcome=Outcome(outcome), started_at=started_at))
    store.seal()
    (dst / "run.json").write_text(json.dumps({"run_id": dst.name}))
    return dst


def test_conflicting_inputs_are_refused_naming_both_unless_prefer_newest(
    sharded: tuple[Path, list[Path], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, shards, _ = sharded
    monkeypatch.chdir(tmp_path)  # the folders are named as from where the command started
    old = _rewrite(shards[0], tmp_path / "old", "pass", started_at="2026-01-01T00:00:00+00:00")
    new = _rewrite(shards[0], tmp_path / "new", "fail", started_at="2026-02-01T00:00:00+00:00")
    out = tmp_path / "r.json"
    assert main(["report", *_results([old, new]), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "is pass in old but fail in new" in err
    assert "--prefer newest" in err
    assert not out.exists()

    # newest: the result that started last wins, whichever order the folders come in
    for order in ([old, new], [new, old]):
        main(["report", "--prefer", "newest", *_results(order), "--out", str(out)])
        outcomes = {r["outcome"] for r in json.loads(out.read_text())["results"]}
        assert outcomes == {"fail"}
    # the same folder twice, or two inputs that agree, are no conflict
    assert main(["report", *_results([old, old]), "--out", str(out)]) == 0
    same = _rewrite(shards[0], tmp_path / "same", "pass", started_at="2026-03-01T00:00:00+00:00")
    assert main(["report", *_results([old, same]), "--out", str(out)]) == 0
