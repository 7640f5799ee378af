"""The matrix as CI jobs: a GitLab child pipeline or a GitHub Actions workflow, as data.

One job per (arch runner group x environment x shard). An environment is the values of the axes
that change what is installed (model/axes.py `env`: cudnn, frontend, cuda, python); a job selects
them, its arch and the drivers of its cells with the ordinary selectors, so the `validate` inside
the job plans exactly the cells the emitter grouped, and `--shard i/n` splits their (cell x case)
units (plan/shard.py; the groups are dispatch/runners.py `job_groups`, as Slurm's are). Each job
keeps its run folder; a last job merges them with `report`, whose exit code is the sign-off. The
engines schedule; this module only writes their files.

Limits: GitLab expands at most 200 jobs from one `parallel: matrix` and names a job in at most 255
characters; GitHub runs at most 256 jobs from one matrix. A runner group with more jobs is split
into numbered jobs (`validate:sm90:2`), and the emitted file says so in a comment.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from validate.dispatch.runners import ENV_AXES
from validate.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from validate.dispatch.runners import JobGroup, Runner

__all__ = [
    "GITHUB_MATRIX_MAX",
    "GITLAB_MATRIX_MAX",
    "GITLAB_NAME_MAX",
    "Emit",
    "PipelineOptions",
    "github_workflow",
    "gitlab_pipeline",
    "to_yaml",
]

Emit = Literal["gitlab", "github"]
GITLAB_MATRIX_MAX: Final = 200
GITLAB_NAME_MAX: Final = 255
GITHUB_MATRIX_MAX: Final = 256
RUNS: Final = "runs"  # where each job writes its run folder, and where the report job finds them


@dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    """What every job shares: the tool's command, extra validate flags, shards per environment."""

    shards: int = 1
    tool: str = "cudnn-matrix"
    validate_args: str = ""  # appended to every `validate` (e.g. --cases DIR --env current)
    matrix: str | None = None  # --matrix / --rules as given to the emitter
    rules: str | None = None
    durations: str | None = None  # --durations FILE (in the checkout) for every shard
    install: str = ""  # a shell line each job runs first (puts the tool on the runner)


def _entries(group: JobGroup, options: PipelineOptions) -> list[dict[str, str]]:
    """One variable set per job of the group: its environment, drivers and shard."""
    base = {axis.upper(): value for axis, value in group.env}
    base["DRIVERS"] = ",".join(group.drivers)
    return [{**base, "SHARD": str(i)} for i in range(1, options.shards + 1)]


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [items]


def _by_arch(groups: Sequence[JobGroup]) -> dict[str, list[JobGroup]]:
    out: dict[str, list[JobGroup]] = {}
    for group in groups:
        out.setdefault(group.arch, []).append(group)
    return out


def _validate_command(
    options: PipelineOptions, runner: Runner, var: Mapping[str, str], results: str
) -> str:
    """The job's `validate` line; `var` maps each variable to how the engine spells it."""
    argv = [f"{var['CUDNN_MATRIX']} validate"]
    if runner.executor != "local":
        argv.append(f"--executor {runner.executor}")
    for flag, value in (("--matrix", options.matrix), ("--rules", options.rules)):
        if value:
            argv.append(f"{flag} {shlex.quote(value)}")
    argv.append(f'--arch "{var["ARCH"]}"')
    argv += [f'--{axis} "{var[axis.upper()]}"' for axis in ENV_AXES if axis.upper() in var]
    argv.append(f'--driver "{var["DRIVERS"]}"')
    argv.append(f'--shard "{var["SHARD"]}/{var["SHARDS"]}"')
    # every shard of a run must split alike: the file given to the emitter, else no history at
    # all (each runner's own cache would give each job another split, losing or doubling units)
    argv.append(f"--durations {shlex.quote(options.durations or 'none')}")
    argv.append(f'--results "{results}"')
    argv.append(var["CUDNN_MATRIX_ARGS"])
    return " ".join(argv)


def _keep_verdict(command: str) -> str:
    """Run `command`; its exit 1 (not signed off) is the report job's to judge, any other failure
    (bad input 2, environment 3, docker 4, a crash) fails this job."""
    return f"rc=0; {command} || rc=$?; echo validate exit $rc; test $rc -le 1"


#: The report job's lines: merge every run folder, publish html and JUnit, then the Markdown table,
#: whose exit code is the job's (0 signed off, 1 not signed off, 2 bad input such as a conflict).
_MERGE: Final = (
    f'args=""; for d in {RUNS}/*/; do args="$args --results $d"; done; echo "merging:$args"'
)


def _report_lines(groups: Sequence[JobGroup]) -> list[str]:
    """The report job's lines. Where a runner declares GPUs (`gpus`, default 1), the sign-off
    line has `--require-gpu`: a job that found no GPU there skipped its GPU cases, which must fail
    the pipeline rather than pass it unproven. Runners that all declare `gpus = 0` (CPU-only) get
    the default: NOT SIGNED OFF — no GPU, exit 0."""
    gpu = any(g.runner.gpus > 0 for g in groups)
    return [
        _MERGE,
        "$CUDNN_MATRIX report $args --format html --out compat.html || test $? -eq 1",
        "$CUDNN_MATRIX report $args --format junit --out junit.xml || test $? -eq 1",
        "$CUDNN_MATRIX report $args" + (" --require-gpu" if gpu else "") + " --out compat.md",
    ]


# --- GitLab -----------------------------------------------------------------------------------


def _gitlab_var(name: str) -> str:
    return f"${{{name}}}"


def gitlab_pipeline(
    groups: Sequence[JobGroup], options: PipelineOptions
) -> tuple[dict[str, Any], list[str]]:
    """The child pipeline as a mapping, and the comments that head the file."""
    notes: list[str] = []
    doc: dict[str, Any] = {
        "stages": ["validate", "report"],
        "variables": {
            "CUDNN_MATRIX": options.tool,
            "CUDNN_MATRIX_ARGS": options.validate_args,
            "SHARDS": str(options.shards),
        },
    }
    names: list[str] = []
    for arch, arch_groups in _by_arch(groups).items():
        runner = arch_groups[0].runner
        entries = [e for g in arch_groups for e in _entries(g, options)]
        chunks = _chunks(entries, GITLAB_MATRIX_MAX)
        if len(chunks) > 1:
            notes.append(
                f"{arch}: {len(entries)} jobs split into {len(chunks)} jobs of at most "
                f"{GITLAB_MATRIX_MAX} (GitLab's parallel:matrix limit)"
            )
        for n, chunk in enumerate(chunks, 1):
            name = f"validate:{arch}" if len(chunks) == 1 else f"validate:{arch}:{n}"
            doc[name] = _gitlab_job(runner, chunk, options)
            names.append(name)
            longest = max(len(f"{name}: [{', '.join(e.values())}]") for e in chunk)
            if longest > GITLAB_NAME_MAX:
                msg = (
                    f"--emit gitlab: a job name of {longest} characters in {name}, more than "
                    f"GitLab's {GITLAB_NAME_MAX}; shorten the axis values"
                )
                raise ConfigError(msg)
        if runner.concurrency:
            notes.append(
                f"{arch}: runner tags {', '.join(runner.tags)}; at most {runner.concurrency} at "
                "once is the runner's `limit` (config.toml), GitLab has no per-job cap"
            )
    doc["report"] = _gitlab_report(names, _report_lines(groups))
    if options.install:
        doc["default"] = {"before_script": [options.install]}
    return doc, notes


def _gitlab_job(
    runner: Runner, entries: Sequence[Mapping[str, str]], options: PipelineOptions
) -> dict[str, Any]:
    var = {
        k: _gitlab_var(k)
        for k in ("CUDNN_MATRIX", "CUDNN_MATRIX_ARGS", "ARCH", "DRIVERS", "SHARD", "SHARDS")
    }
    var.update(
        {
            axis.upper(): _gitlab_var(axis.upper())
            for axis in ENV_AXES
            if any(axis.upper() in e for e in entries)
        }
    )
    results = f"{RUNS}/{runner.arch}-${{CI_JOB_ID}}"
    job: dict[str, Any] = {"stage": "validate", "tags": list(runner.tags)}
    if runner.image:
        job["image"] = runner.image
    job["variables"] = {"ARCH": runner.arch, "CUDNN_MATRIX_GPUS": str(runner.gpus)}
    job["parallel"] = {"matrix": [dict(e) for e in entries]}
    job["script"] = [
        _keep_verdict(_validate_command(options, runner, var, results)),
        f'{var["CUDNN_MATRIX"]} report --results "{results}" --format junit --out "{results}/junit.xml" || true',
    ]
    job["artifacts"] = {
        "when": "always",
        # gitlab-ci-local passes on only `paths:`, so the JUnit file is listed there as well
        "paths": [f"{results}/"],
        "reports": {"junit": f"{results}/junit.xml"},
    }
    return job


def _gitlab_report(needs: Sequence[str], lines: Sequence[str]) -> dict[str, Any]:
    """Runs only when every validate job succeeded (a job's infra failure is no sign-off)."""
    return {
        "stage": "report",
        "needs": [{"job": name, "artifacts": True} for name in needs],
        "script": list(lines),
        "artifacts": {
            "when": "always",
            "paths": ["compat.md", "compat.html", "junit.xml", f"{RUNS}/"],
            "reports": {"junit": "junit.xml"},
        },
    }


# --- GitHub -----------------------------------------------------------------------------------


_GH_ID: Final = re.compile(r"[^A-Za-z0-9_-]")


def github_workflow(
    groups: Sequence[JobGroup], options: PipelineOptions
) -> tuple[dict[str, Any], list[str]]:
    """The workflow as a mapping, and the comments that head the file."""
    notes: list[str] = []
    jobs: dict[str, Any] = {}
    for arch, arch_groups in _by_arch(groups).items():
        runner = arch_groups[0].runner
        entries = [e for g in arch_groups for e in _entries(g, options)]
        chunks = _chunks(entries, GITHUB_MATRIX_MAX)
        if len(chunks) > 1:
            notes.append(
                f"{arch}: {len(entries)} jobs split into {len(chunks)} jobs of at most "
                f"{GITHUB_MATRIX_MAX} (GitHub's matrix limit)"
            )
        for n, chunk in enumerate(chunks, 1):
            job_id = _GH_ID.sub(
                "_", f"validate-{arch}" if len(chunks) == 1 else f"validate-{arch}-{n}"
            )
            jobs[job_id] = _github_job(runner, chunk, options, job_id)
    needs = list(jobs)
    jobs["report"] = _github_report(needs, options, _report_lines(groups))
    doc: dict[str, Any] = {
        "name": "cudnn-matrix",
        "on": {"workflow_dispatch": None, "workflow_call": None},
        "env": {
            "CUDNN_MATRIX": options.tool,
            "CUDNN_MATRIX_ARGS": options.validate_args,
            "SHARDS": str(options.shards),
        },
        "jobs": jobs,
    }
    return doc, notes


def _github_job(
    runner: Runner, entries: Sequence[Mapping[str, str]], options: PipelineOptions, job_id: str
) -> dict[str, Any]:
    keys = {k for e in entries for k in e}
    var = {k: f"${k}" for k in ("CUDNN_MATRIX", "CUDNN_MATRIX_ARGS", "ARCH", "SHARDS")}
    var.update({k: f"${{{{ matrix.{k.lower()} }}}}" for k in keys})
    results = f"{RUNS}/{runner.arch}-${{{{ github.run_id }}}}-${{{{ strategy.job-index }}}}"
    job: dict[str, Any] = {
        "runs-on": list(runner.runs_on),
        "env": {"ARCH": runner.arch, "CUDNN_MATRIX_GPUS": str(runner.gpus)},
    }
    if runner.image:
        job["container"] = {"image": runner.image}
    job["strategy"] = {
        "fail-fast": False,
        "max-parallel": runner.concurrency,
        "matrix": {"include": [{k.lower(): v for k, v in e.items()} for e in entries]},
    }
    command = _validate_command(options, runner, var, results)
    job["steps"] = [
        {"uses": "actions/checkout@v4"},
        *_github_install(options),
        {"name": "validate", "shell": "bash", "run": _keep_verdict(command)},
        {
            "name": "junit",
            "if": "always()",
            "shell": "bash",
            "run": f'$CUDNN_MATRIX report --results "{results}" --format junit --out "{results}/junit.xml" || true',
        },
        {
            "uses": "actions/upload-artifact@v4",
            "if": "always()",
            "with": {
                "name": f"{job_id}-${{{{ strategy.job-index }}}}",
                "path": results,
                "include-hidden-files": True,
            },
        },
    ]
    return job


def _github_install(options: PipelineOptions) -> list[dict[str, Any]]:
    return [{"name": "install", "shell": "bash", "run": options.install}] if options.install else []


def _github_report(
    needs: Sequence[str], options: PipelineOptions, lines: Sequence[str]
) -> dict[str, Any]:
    """Runs only when every validate job succeeded (a job's infra failure is no sign-off)."""
    return {
        "needs": list(needs),
        "runs-on": "ubuntu-latest",
        "steps": [
            {"uses": "actions/checkout@v4"},
            *_github_install(options),
            {"uses": "actions/download-artifact@v4", "with": {"path": RUNS}},
            {"name": "report", "shell": "bash", "run": "\n".join(lines)},
            {
                "uses": "actions/upload-artifact@v4",
                "if": "always()",
                "with": {"name": "compat", "path": "compat.md\ncompat.html\njunit.xml"},
            },
        ],
    }


# --- YAML ---------------------------------------------------------------------------------------

_PLAIN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/@-]*")
_YAML_WORDS: Final = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"})


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS and not text.endswith(":"):
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _lines(value: object, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out = []
        for key, item in value.items():
            head = f"{pad}{_scalar(key)}:"
            if isinstance(item, dict | list) and item:
                out.append(head)
                out += _lines(item, indent + 1)
            else:
                out.append(
                    f"{head} {_scalar(item) if not isinstance(item, dict | list) else '{}' if isinstance(item, dict) else '[]'}"
                )
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if isinstance(item, dict | list) and item:
                inner = _lines(item, indent + 1)
                out.append(f"{pad}- {inner[0].lstrip()}")
                out += inner[1:]
            else:
                out.append(f"{pad}- {_scalar(item)}")
        return out
    return [pad + _scalar(value)]


def to_yaml(doc: Mapping[str, Any], comments: Sequence[str] = ()) -> str:
    """Block-style YAML of plain data (mappings, lists, strings, numbers, booleans, null), headed
    by `comments`; strings that YAML could read as something else are double-quoted."""
    head = [f"# {line}" if line else "#" for line in comments]
    return "\n".join([*head, *_lines(dict(doc), 0)]) + "\n"
