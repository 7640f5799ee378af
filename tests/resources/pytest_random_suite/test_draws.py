"""Draws with Python's unseeded `random`, as the frontend's test_mhas.py draws the shapes of
test_sdpa: without the tool's reseeding, an id's value, and so its outcome, depends on the draws
of the tests that ran before it in its process. Each test writes its node id and its value to
draws/ beside this file."""

import json
import random
from pathlib import Path

import pytest

DRAWS = Path(__file__).resolve().parent / "draws"


@pytest.mark.parametrize("i", range(12))
def test_draw(request: pytest.FixtureRequest, i: int) -> None:
    value = random.random()
    DRAWS.mkdir(exist_ok=True)
    (DRAWS / f"{i}.json").write_text(json.dumps({"id": request.node.nodeid, "value": value}))
    if value < 0.3:
        pytest.skip("the shapes drawn are not supported")
