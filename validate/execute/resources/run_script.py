"""Bootstrap for one script case; executed by the CASE env's Python. Stdlib only.

Usage: python run_script.py SCRIPT REPORT_JSON [ARGS...]

Runs SCRIPT as ``__main__`` and writes REPORT_JSON at its exit (script_boot.py says how). The
work is in script_boot.py beside this file, imported rather than written here: the file Python
is started on is compiled at every start (about a millisecond of every case), an imported
module's bytecode is cached.
"""

import sys

if __name__ == "__main__":
    from os.path import abspath, dirname  # os is imported by every start; no pathlib

    _here = dirname(abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib
    if sys.path[:1] != [_here]:  # python -P adds no script folder
        sys.path.insert(0, _here)
    import script_boot  # type: ignore[import-not-found] # beside this file, found at run time

    # kept only under a private name: a case's own `script_boot` module is its own
    sys.modules["_cudnn_matrix_script_boot"] = sys.modules.pop("script_boot")
    sys.exit(script_boot.main())
