"""Bootstrap for one script case; executed by the CASE env's Python. Stdlib only.

Usage: python run_script.py SCRIPT REPORT_JSON [ARGS...]

Runs SCRIPT as ``__main__`` and writes REPORT_JSON at its exit (script_boot.py says how). The
work is in script_boot.py beside this file, imported rather than written here: the file Python
is started on is compiled at every start (about a millisecond of every case), an imported
module's bytecode is cached.
"""

import sys


def fork_boot() -> object:
    """For resources/fork_server.py: the bootstrap's imports done, as a fresh start does them;
    returns what runs one case (script_boot.main, with sys.argv as a fresh start has it)."""
    import script_boot  # type: ignore[import-not-found] # beside this file, found at run time

    # as below: a case's own `script_boot` module is its own
    sys.modules["_cudnn_matrix_script_boot"] = sys.modules.pop("script_boot")
    script_boot.preload()
    return script_boot.main


if __name__ == "__main__":
    from os.path import abspath, dirname  # os is imported by every start; no pathlib

    _here = dirname(abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib
    if sys.path[:1] != [_here]:  # python -P adds no script folder
        sys.path.insert(0, _here)
    import script_boot  # beside this file, found at run time (as in fork_boot)

    # kept only under a private name: a case's own `script_boot` module is its own
    sys.modules["_cudnn_matrix_script_boot"] = sys.modules.pop("script_boot")
    sys.exit(script_boot.main())
