"""Every option of every command has help text, and every --help ends with the exit-code table."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from validate.cli import EXIT_CODES, build_parser
from validate.model.axes import REGISTRY, parse_value


def _commands(
    parser: argparse.ArgumentParser | None = None, prefix: str = "cudnn-matrix"
) -> dict[str, argparse.ArgumentParser]:
    """Every parser, nested sub-commands (envs list, images build) included."""
    parser = parser or build_parser()
    found = {prefix: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.update(_commands(child, f"{prefix} {name}"))
    return found


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_has_help_and_the_exit_codes(name: str) -> None:
    parser = _commands()[name]
    missing = [
        "/".join(action.option_strings)
        for action in parser._actions
        if action.option_strings and not action.help and action.help != argparse.SUPPRESS
    ]
    assert missing == [], f"{name}: options without help text"
    assert parser.format_help().rstrip().endswith(EXIT_CODES.splitlines()[-1])


def test_the_readme_has_the_same_exit_codes() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("Exit codes (also at the end of every `--help`):", 1)[1].split("\n\n")[1]
    in_readme = re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)
    in_help = re.findall(r"^  (\d+) ", EXIT_CODES, flags=re.MULTILINE)
    assert in_readme == in_help


@pytest.mark.parametrize("axis", [a.name for a in REGISTRY])
def test_an_axis_flag_shows_the_example_its_refusal_names(axis: str) -> None:
    """`--frontend latest` was refused with a cuDNN version as its example: each axis flag's
    --help example and its one-line refusal name the same value, a valid value of that axis and
    of no other version axis (a frontend example is not a cuDNN one)."""
    helps = {
        action.help
        for parser in _commands().values()
        for action in parser._actions
        if f"--{axis}" in action.option_strings and action.help and "e.g." in action.help
    }
    assert helps, f"no command shows an example for --{axis}"
    examples = {str(text).rsplit("e.g. ", 1)[1].rstrip(")") for text in helps}
    assert len(examples) == 1, examples
    (example,) = examples
    assert parse_value(axis, example) == example
    with pytest.raises(ValueError, match=r"'latest' \(") as refused:
        parse_value(axis, "latest")
    if axis != "python":  # its refusal has a fixed CPython example ("like 3.12 or 3.12.4")
        assert example in str(refused.value)
    others = {a.example for a in REGISTRY if a.name != axis}
    assert example not in others
