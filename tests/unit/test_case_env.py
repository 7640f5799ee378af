"""The case environment of a pinned backend folder: every consumer binds to the pinned copy."""

from __future__ import annotations

from pathlib import Path

from validate.env.target import ExecTarget
from validate.env.venvs import backend_env


def test_the_pinned_folder_goes_first_and_its_dispatcher_is_preloaded() -> None:
    target = ExecTarget(env=backend_env("/store/9.25.1.1/lib"))
    host = {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "LD_PRELOAD": "/opt/libfoo.so", "A": "1"}
    env = target.process_env(host)
    assert env["LD_LIBRARY_PATH"] == "/store/9.25.1.1/lib:/usr/local/cuda/lib64"
    assert env["LD_PRELOAD"] == "/store/9.25.1.1/lib/libcudnn.so.9:/opt/libfoo.so"
    assert env["A"] == "1"
    assert host["LD_PRELOAD"] == "/opt/libfoo.so"  # the caller's mapping is left as it was


def test_without_host_values_the_overlay_is_used_as_it_is() -> None:
    env = ExecTarget(env=backend_env("/b/lib")).process_env({})
    assert env == {"LD_LIBRARY_PATH": "/b/lib", "LD_PRELOAD": str(Path("/b/lib/libcudnn.so.9"))}


def test_no_backend_folder_sets_nothing() -> None:
    assert backend_env(None) == {}
    assert ExecTarget(env=backend_env(None)).process_env({"LD_PRELOAD": "/x.so"}) == {
        "LD_PRELOAD": "/x.so"
    }
