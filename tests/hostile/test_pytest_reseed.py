"""An order-dependent suite (tests/resources/pytest_random_suite: shapes drawn with an unseeded
`random`, as the frontend's test_mhas.py draws them): the tool seeds each test's draws by its node
id (resources/run_pytest.py, `_Reseed`), so an id draws the same in a share beside others and
alone (`--case`), and `-p no:cudnn_matrix_reseed` in --tests-select leaves the suite's randomness
as it is. On the GPU, 304 and then 788 test_mhas.py ids flipped between pass and skip against plain
pytest-xdist (reports/gpu/2026-12-07-h200-l0-9.24, 2026-12-07-h100-l0-9.24-b)."""

from __future__ import annotations

import json
import random
import shutil
import zlib
from pathlib import Path

from usercli import cli

SUITE = Path(__file__).resolve().parents[1] / "resources" / "pytest_random_suite"


def _draws(suite: Path) -> dict[str, float]:
    """Each test's node id and the value it drew, then the draws are cleared."""
    found = [json.loads(p.read_text()) for p in (suite / "draws").glob("*.json")]
    shutil.rmtree(suite / "draws")
    return {d["id"]: d["value"] for d in found}


def _outcomes(run: Path) -> dict[str, str]:
    rows = [json.loads(ln) for ln in (run / "results.jsonl").read_text().splitlines()]
    return {r["case"]: r["outcome"] for r in rows}


def test_each_id_draws_from_its_own_seed_in_a_share_and_alone(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite)
    proc = cli("run", "--tests", "suite", "--jobs", "2", "--results", "shares", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    draws = _draws(suite)
    assert len(draws) == 12
    # the first draw of a generator seeded with zlib.crc32 of the node id, whatever ran before
    for nodeid, value in draws.items():
        assert value == random.Random(zlib.crc32(nodeid.encode())).random(), nodeid
    outcomes = _outcomes(tmp_path / "shares")
    assert outcomes == {i: "skip" if v < 0.3 else "pass" for i, v in draws.items()}
    # one id alone, in a process of its own, as a repro runs it: the same draw, the same outcome
    last = max(draws)
    alone = cli("run", "--tests", "suite", "--case", last, "--results", "alone", cwd=tmp_path)
    assert alone.returncode == 0, alone.stdout + alone.stderr[-3000:]
    assert _draws(suite) == {last: draws[last]}
    assert _outcomes(tmp_path / "alone") == {last: outcomes[last]}


def test_the_suites_own_randomness_stays_where_the_selection_blocks_the_reseeding(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite)
    select = "-p no:cudnn_matrix_reseed"
    proc = cli("run", "--tests", "suite", "--tests-select", select, "--results", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    draws = _draws(suite)
    assert len(draws) == 12
    seeded = {i: random.Random(zlib.crc32(i.encode())).random() for i in draws}
    assert draws != seeded  # a process's own seed (os.urandom): equal by chance 1 in 2**600
    assert _outcomes(tmp_path / "r") == {i: "skip" if v < 0.3 else "pass" for i, v in draws.items()}


def test_a_resume_runs_again_what_was_drawn_another_way(tmp_path: Path) -> None:
    """How the draws are seeded is part of a result's content key: a run with the reseeding
    blocked, resumed with it on, runs every id again (its draws would be other ones); resumed
    the same way again, it runs none."""
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite)
    select = "-p no:cudnn_matrix_reseed"
    proc = cli("run", "--tests", "suite", "--tests-select", select, "--results", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert len(_draws(suite)) == 12
    again = cli("run", "--tests", "suite", "--results", "r", "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    draws = _draws(suite)
    assert len(draws) == 12, again.stderr[-3000:]
    assert all(v == random.Random(zlib.crc32(i.encode())).random() for i, v in draws.items())
    assert _outcomes(tmp_path / "r") == {i: "skip" if v < 0.3 else "pass" for i, v in draws.items()}
    kept = cli("run", "--tests", "suite", "--results", "r", "--resume", cwd=tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr[-3000:]
    assert not (suite / "draws").exists(), kept.stderr[-3000:]
