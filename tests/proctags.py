"""The processes a test started, found by a tag in their environment: every process the tool starts
inherits it, so a test finds only its own, never another checkout's tests on the same machine."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

TAG_VAR = "CUDNN_MATRIX_TEST_TAG"


def tagged_env() -> tuple[str, dict[str, str]]:
    """A new tag and the environment (this one plus the tag) to start the tool with."""
    tag = uuid.uuid4().hex
    return tag, {**os.environ, TAG_VAR: tag}


def tagged(tag: str, marker: str = "") -> list[str]:
    """`pid args` of the live (not zombie) processes carrying `tag` whose command line contains
    `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z" and f"{TAG_VAR}={tag}".encode() in environ.split(b"\0") and marker in args:
            found.append(f"{proc.name} {args.strip()}")
    return found


def kill_tagged(tag: str) -> None:
    """SIGKILL whatever a failed assertion left behind, by pid."""
    for line in tagged(tag):
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def default_sigint() -> None:
    """preexec_fn for a tool started as from a terminal: a shell without job control starts
    background commands with SIGINT ignored, and that disposition is inherited (a CI script run
    with `&` would hide Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
