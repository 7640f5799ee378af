"""Imports run one way: a stage never imports a later one (DESIGN.md, "Target layout").

An AST walk over every module of the package, so a planted upward import (even one inside a
function or under TYPE_CHECKING) fails here, naming the file, the line and both stages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "validate"

#: Stages from the bottom up; a module may import its own stage and any stage listed before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "validate",
        "validate.__init__",
        "validate._compat",
        "validate.errors",
        "validate.log",
        "validate.datafile",
    ),
    ("validate.model",),
    ("validate.config",),
    ("validate.plan",),
    ("validate.env",),
    ("validate.execute",),
    ("validate.judge",),
    ("validate.report",),
    ("validate.workflow", "validate.remeasure"),
    ("validate.dispatch",),
    ("validate.cli", "validate.__main__"),
)


def layer_of(module: str) -> int:
    """Index of the stage that owns a dotted module name (the longest matching prefix wins)."""
    best, best_len = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        msg = f"module {module} belongs to no stage; add it to LAYERS in {__file__}"
        raise AssertionError(msg)
    return best


def module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_pkg: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every validate.* import, relative ones resolved."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "validate"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            if name.split(".")[0] != "validate":
                continue
            # `from validate.x import y` may import the submodule validate.x.y
            out += [(node.lineno, f"{name}.{a.name}") for a in node.names]
    return out


def violations(root: Path = PACKAGE) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if "resources" in path.relative_to(root).parts:  # run inside the case process, standalone
            continue
        module = module_name(path, root)
        own = layer_of(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in imported(tree, module, path.name == "__init__.py"):
            target = layer_of(name)
            if target > own:
                found.append(
                    f"{path.relative_to(root.parent)}:{line}: {module} ({LAYERS[own][0]}) "
                    f"imports {name} ({LAYERS[target][0]}), a later stage"
                )
    return found


def test_imports_run_one_way() -> None:
    assert violations() == []


def test_a_planted_upward_import_is_caught(tmp_path: Path) -> None:
    """The check itself can fail: a model module importing the CLI is reported with its line."""
    pkg = tmp_path / "validate"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "__init__.py").write_text("")
    (pkg / "model" / "axes.py").write_text(
        "import os\n\ndef f():\n    from validate.cli import main\n"
    )
    expected = (
        "validate/model/axes.py:4: validate.model.axes (validate.model) imports "
        "validate.cli.main (validate.cli), a later stage"
    )
    assert violations(pkg) == [expected]


def test_the_workflow_importing_a_dispatcher_is_caught(tmp_path: Path) -> None:
    """Fan-out sits above the workflow: the workflow may not reach up into dispatch/."""
    pkg = tmp_path / "validate"
    (pkg / "dispatch").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "dispatch" / "__init__.py").write_text("")
    (pkg / "dispatch" / "slurm.py").write_text("from validate.workflow import run\n")
    (pkg / "workflow.py").write_text("from validate.dispatch import slurm\n")
    expected = (
        "validate/workflow.py:1: validate.workflow (validate.workflow) imports "
        "validate.dispatch.slurm (validate.dispatch), a later stage"
    )
    assert violations(pkg) == [expected]


@pytest.mark.parametrize(
    ("module", "stage"),
    [
        ("validate.errors", 0),
        ("validate.model.axes", 1),
        ("validate.execute.cases.script", 5),
        ("validate.workflow", 8),
        ("validate.dispatch.slurm", 9),
        ("validate.cli.validate", 10),
    ],
)
def test_layer_of(module: str, stage: int) -> None:
    assert layer_of(module) == stage
