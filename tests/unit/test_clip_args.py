"""A leftover process's command line in a case's note keeps the script it runs (CI's long nox
venv path once cut `double_fork.py` to `double_fork.` at 200 characters)."""

from __future__ import annotations

from validate.execute.resources.guard import clip_args


def test_a_long_command_line_keeps_its_head_and_its_script() -> None:
    venv = "/tmp/ci8/.nox/tests/lib/python3.11/site-packages/validate/execute/resources"
    args = f"/tmp/ci8/.nox/tests/bin/python {venv}/run_script.py /tmp/{'x' * 120}/double_fork.py"
    shown = clip_args(args)
    assert len(shown) == 200
    assert shown.startswith("/tmp/ci8/.nox/tests/bin/python")
    assert shown.endswith("/double_fork.py")
    assert "…" in shown


def test_a_short_command_line_is_whole() -> None:
    assert clip_args("python -c 'import time; time.sleep(600)'") == (
        "python -c 'import time; time.sleep(600)'"
    )
