"""One test per outcome a probe could see if it ran more than the node id it was given."""

import cudnn
import pytest


def _version() -> tuple[int, int]:
    major, minor = (int(part) for part in cudnn.__version__.split(".")[:2])
    return major, minor


@pytest.mark.parametrize("release", ["1.27"])
def test_before(release: str) -> None:
    """Passes on a frontend older than RELEASE, fails from it on (no GPU needed)."""
    wanted = tuple(int(part) for part in release.split("."))
    assert _version() < wanted, f"frontend {cudnn.__version__} is >= {release}"


def test_always_fails() -> None:
    """Fails in every cell: a probe that ran it would see a second result."""
    raise AssertionError("not selected: a probe runs only the node id it names")
