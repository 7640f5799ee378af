"""The wheel's packages: every package under validate/, found (issue #36: a hand-kept list in
pyproject missed two and the installed tool crashed), plus the two data packages that
pyproject's package-dir maps from the checkout's data-only folders (matrix/, images/)."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["validate", "validate.*"]),
        "validate._matrix",  # matrix/*.toml
        "validate._images",  # images/Dockerfile*
    ]
)
