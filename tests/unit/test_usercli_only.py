"""The tests start the tool one way: through tests/usercli.py (issue #36 item 9). No other test
file spells `-m validate` or builds the tool's command line from `installed_tool()`, and none
starts it in the checkout (`cwd=REPO`): a test that started `python -m validate` from the
checkout (cwd and PYTHONPATH at it) ran the checkout's package, and so hid a wheel that crashed
for every user who installed it. Nor does a test put the checkout on a python path
(`PYTHONPATH=REPO`, `setenv("PYTHONPATH", ...)`, `sys.path.insert(0, ROOT)`) or start a python
(`-c`, `-m`) in it: the tests run the installed tool (tests/unit/test_installed.py).

Read from the test files' syntax trees, not their text: a docstring that says `python -m
validate` is prose, a string or a list that holds it is a command line.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HELPER = TESTS / "usercli.py"
#: `-m validate` as a command: a shell string, an f-string's text, a `--tool` value
_SPELLED = re.compile(r"(?:^|\s)-m\s+validate(?:\.__main__)?(?:\s|$)")
#: What the tests call the checkout's root folder (`Path(__file__).resolve().parents[2]`).
_CHECKOUT = {"REPO", "ROOT"}
#: usercli's ways to start the tool, each with a `cwd`
_STARTS = {"cli", "start", "on_a_terminal"}
#: Files that may spell it, how often, and why: no test of these runs it.
ALLOWED = {
    # the command the docker executor puts in the container (validate/execute/docker.py), held
    # against the request it sends: data the test checks, never a process it starts
    "unit/test_docker_request.py": 1,
}


def _test_files() -> list[Path]:
    """Every test file but the helper and this one (whose samples, below, spell it on purpose)."""
    mine = (HELPER, Path(__file__).resolve())
    return sorted(
        p
        for p in TESTS.rglob("*.py")
        if p not in mine and "resources" not in p.relative_to(TESTS).parts
    )


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _sequences(tree: ast.AST) -> list[tuple[int, list[ast.expr]]]:
    """Every run of items that may be an argv: list, tuple and set displays, call arguments."""
    runs: list[tuple[int, list[ast.expr]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            runs.append((node.lineno, list(node.elts)))
        elif isinstance(node, ast.Call):
            runs.append((node.lineno, list(node.args)))
    return runs


def _is(node: ast.expr, *values: str) -> bool:
    return isinstance(node, ast.Constant) and node.value in values


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _checkout(node: ast.AST) -> bool:
    """Whether an expression names the checkout (REPO, ROOT, `str(REPO)`, `f"{ROOT}:..."`)."""
    return any(isinstance(n, ast.Name) and n.id in _CHECKOUT for n in ast.walk(node))


def _on_the_path(node: ast.AST) -> str | None:
    """How `node` puts the checkout on a python path, if it does."""
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is not None and _is(key, "PYTHONPATH") and _checkout(value):
                return "PYTHONPATH at the checkout"
    if not isinstance(node, ast.Call):
        return None
    for kw in node.keywords:
        if kw.arg == "PYTHONPATH" and _checkout(kw.value):
            return "PYTHONPATH at the checkout"
        if kw.arg == "cwd" and _checkout(kw.value) and node.args and _python_argv(node.args[0]):
            return "a python started in the checkout (cwd is first on its path)"
    for first, second in itertools.pairwise(node.args):
        if _is(first, "PYTHONPATH") and _checkout(second):
            return "PYTHONPATH at the checkout"
    func = node.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("insert", "append")
        and ast.unparse(func.value) == "sys.path"
        and any(_checkout(arg) for arg in node.args)
    ):
        return "the checkout on sys.path"
    return None


def _python_argv(node: ast.expr) -> bool:
    """An argv display with `-c` or `-m` in it: a python that puts its cwd first on its path."""
    return isinstance(node, ast.List | ast.Tuple) and any(_is(e, "-c", "-m") for e in node.elts)


def offences(source: str) -> list[str]:
    """Where `source` starts the tool itself: `"-m", "validate"` in a sequence, `-m validate` in
    a string that is no docstring, a call of `installed_tool()`, usercli's `cli`, `start` or
    `on_a_terminal` with `cwd=REPO` (or ROOT); and where it puts the checkout on a python path
    (PYTHONPATH, sys.path) or starts a python in it."""
    tree = ast.parse(source)
    found = []
    for line, items in _sequences(tree):
        for first, second in itertools.pairwise(items):
            if _is(first, "-m") and _is(second, "validate", "validate.__main__"):
                found.append(f'line {line}: "-m", "validate"')
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in prose
            and _SPELLED.search(node.value)
        ):
            found.append(f"line {node.lineno}: {node.value.strip()!r}")
        elif isinstance(node, ast.Call) and _name(node.func) == "installed_tool":
            found.append(f"line {node.lineno}: installed_tool() (use cli, start or command)")
        elif isinstance(node, ast.Call) and _name(node.func) in _STARTS:
            for kw in node.keywords:
                if kw.arg == "cwd" and _name(kw.value) in _CHECKOUT:
                    found.append(f"line {node.lineno}: cwd={_name(kw.value)}, the checkout")
        if (how := _on_the_path(node)) is not None:
            found.append(f"line {getattr(node, 'lineno', 0)}: {how}")
    return sorted(set(found))


def test_no_test_file_starts_the_tool_its_own_way() -> None:
    wrong = {}
    for path in _test_files():
        name = path.relative_to(TESTS).as_posix()
        found = offences(path.read_text(encoding="utf-8"))
        if len(found) != ALLOWED.get(name, 0):
            wrong[name] = found
    assert wrong == {}, (
        "start the tool through tests/usercli.py (cli, start, command; on_a_terminal(command(...)))"
        ", in a folder that is not the checkout, and leave the checkout off every python path (the"
        f" tests run the installed tool): {wrong}"
    )


def test_the_allowed_files_are_still_there() -> None:
    for name in ALLOWED:
        assert (TESTS / name).is_file(), name


@pytest.mark.parametrize(
    "source",
    [
        'subprocess.run([sys.executable, "-m", "validate", "run"])',
        'argv = (sys.executable, "-m", "validate")',
        'subprocess.Popen([python, "-m", "validate.__main__", "report"])',
        'tool = f"{sys.executable} -m validate"',
        'subprocess.run(["sh", "-c", "python3 -m validate plan"])',
        "argv = [*installed_tool(), 'validate']",
        "argv = usercli.installed_tool() + ['report']",
        'cli("plan", cwd=REPO)',
        'usercli.start("run", "cases", cwd=ROOT, stdout=PIPE)',
        "on_a_terminal(command('report'), width=80, cwd=REPO)",
        'env = {**os.environ, "PYTHONPATH": str(REPO)}',
        'env = {"PATH": "/bin", "PYTHONPATH": f"{ROOT}:{site}"}',
        "env = dict(os.environ, PYTHONPATH=str(ROOT))",
        'monkeypatch.setenv("PYTHONPATH", str(REPO))',
        "sys.path.insert(0, str(ROOT))",
        'subprocess.run([sys.executable, "-c", code], cwd=REPO)',
        'subprocess.Popen([python, "-m", "pytest", "x.py"], cwd=ROOT)',
    ],
)
def test_each_way_of_spelling_it_is_found(source: str) -> None:
    assert offences(source) != []


@pytest.mark.parametrize(
    "source",
    [
        '"""Runs `python -m validate plan` as a user does."""',
        'def f() -> None:\n    """`python -m validate` on the nodes."""\n',
        'cli("run", "--tests", "suite", cwd=tmp_path)',
        'subprocess.run([sys.executable, "-m", "pip", "download"])',
        'subprocess.run([sys.executable, "-m", "validate_other"])',
        'subprocess.run([sys.executable, "-c", "import validate"])',
        'subprocess.run(["git", "status"], cwd=REPO)',
        'cli("plan", "--matrix", str(REPO / "m.toml"), cwd=tmp_path)',
        'env = {**os.environ, "PYTHONPATH": str(site)}',
        'env = {**os.environ, "PYTHONPATH": ""}',
        'monkeypatch.setenv("PYTHONPATH", str(tmp_path))',
        "sys.path.insert(0, str(tmp_path))",
        'subprocess.run([sys.executable, "-c", code], cwd=tmp_path)',
        'subprocess.run(["git", "-C", str(REPO), "-c", "user.name=t"], cwd=tmp_path)',
    ],
)
def test_what_is_not_starting_the_tool_is_left_alone(source: str) -> None:
    assert offences(source) == []
