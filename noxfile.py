"""specrig's front door. Each session installs specrig into its own venv and
calls one ``specrig`` sub-command with the options given after ``--``
(``nox -s NAME -- --help`` lists them). The logic lives in src/specrig/."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))
from specrig.core.frontdoor import passing_signals  # standard library only: nox imports it here

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

PYTHON = "3.11"
RUFF = "ruff==0.14.6"


def _install(session: nox.Session, *args: str) -> None:
    """Install with the bytecode compiled (pip's default; uv's only when asked): where Python may not
    write its cache, every specrig process would compile its imports from source again."""
    session.install(*args, env={"UV_COMPILE_BYTECODE": "1"})


def _specrig(session: nox.Session, command: str, *extra: str) -> None:
    _install(session, "-e", ".")
    # interrupted, nox waits until specrig has stopped what it started, then ends by the signal
    # (specrig.core.frontdoor)
    with passing_signals():
        session.run("specrig", command, *extra, *session.posargs, interrupt_timeout=None)


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Resolve recipes into hash-pinned locks (recipes/RECIPE.ENV.lock)."""
    _specrig(session, "lock")


@nox.session(python=PYTHON)
def env(session: nox.Session) -> None:
    """Make (or reuse) an engine environment exactly from its lock."""
    _specrig(session, "env")


@nox.session(python=PYTHON)
def bundle(session: nox.Session) -> None:
    """Download every file a lock installs into one folder (volumes optional) for offline installs."""
    _specrig(session, "bundle")


@nox.session(python=PYTHON)
def kit(session: nox.Session) -> None:
    """One kit for a GPU host with no network: engines, model, specrig, uv and an installer, in volumes."""
    _specrig(session, "kit")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmark a real engine: decode throughput, spec-decode acceptance, thresholds."""
    _specrig(session, "bench")


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Put several bench runs side by side (markdown table and PNG plots)."""
    _specrig(session, "report")


@nox.session(python=PYTHON)
def study(session: nox.Session) -> None:
    """Run a study file's steps (bench, drafter, report, ...) into one folder: check, run, status, pack."""
    _specrig(session, "study")


@nox.session(python=PYTHON)
def project(session: nox.Session) -> None:
    """Scale few-layer runs of a model to all its layers and to the story's host (break-even per k)."""
    _specrig(session, "project")


@nox.session(python=PYTHON)
def results(session: nox.Session) -> None:
    """Make the results page (docs/results.md) from the studies' captures; `-- --check` only compares."""
    _specrig(session, "results")


@nox.session(python=PYTHON)
def build_flash_attn(session: nox.Session) -> None:
    """Build a flash-attn wheel for the recipe's GPU arch into the wheelhouse."""
    _specrig(session, "build", "flash-attn")


@nox.session(python=PYTHON)
def build_sgl_kernel(session: nox.Session) -> None:
    """Build an sgl-kernel wheel for the recipe's GPU arch into the wheelhouse."""
    _specrig(session, "build", "sgl-kernel")


@nox.session(python=PYTHON)
def patch(session: nox.Session) -> None:
    """Check, apply, show or revert the recipe's patch sets on an environment."""
    _specrig(session, "patch")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: formatting and lint rules (pyproject.toml [tool.ruff]); `-- --fix` rewrites."""
    session.install(RUFF)
    fix = "--fix" in session.posargs
    session.run("ruff", "format", *([] if fix else ["--check", "--diff"]), ".")
    session.run("ruff", "check", *(["--fix"] if fix else []), ".")


@nox.session(python=PYTHON)
def drafter(session: nox.Session) -> None:
    """Train an EAGLE-3 drafter for the recipe's target (registered as @eagle3-trained)."""
    _specrig(session, "drafter")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite: the contract tests in tests/ (unit tests plus real-engine, nvcc and PyPI-artifact
    tests) and the studies' replays of their captures (studies/*/test_replay.py), pyproject.toml's testpaths:
    on two workers, each on its own cores. `-- ARGS` runs `pytest ARGS` instead."""
    _install(session, "-e", ".", *nox.project.dependency_groups(nox.project.load_toml("pyproject.toml"), "test"))
    session.run("python", "-m", "compileall", "-q", "src")  # the editable checkout too: the tests start specrig often
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    # two workers: a real server's start (three processes importing vLLM, one after another, on one core)
    # or a training run overlaps the other tests; tests/conftest.py keeps each module on one worker, gives
    # each worker cores of its own (so the timing comparisons are not disturbed by the other's servers)
    # and hands out the longest groups first. The slowest are said every run.
    session.run("pytest", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "--durations=30")
