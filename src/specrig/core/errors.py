"""One exception family. Each error carries a message (what is wrong), a hint
(what to do next) and a fixed exit code, so the CLI and nox sessions can stop
with a clear, actionable line instead of a traceback."""

from __future__ import annotations

__all__ = [
    "SpecrigError",
    "ConfigError",
    "LockError",
    "HashMismatchError",
    "EnvError",
    "HostError",
    "BuildError",
    "PatchError",
    "EngineError",
    "BenchError",
    "ThresholdError",
    "StudyError",
]


class SpecrigError(Exception):
    """Base class: ``str(err)`` is the message followed by the hint."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class ConfigError(SpecrigError):
    """A recipe, build definition, patch set or command-line option is invalid."""

    exit_code = 2


class LockError(SpecrigError):
    """A lock is missing, malformed or stale."""

    exit_code = 3


class HashMismatchError(SpecrigError):
    """An artifact's hash differs from the one recorded."""

    exit_code = 4


class EnvError(SpecrigError):
    """An environment could not be made or does not match its lock."""

    exit_code = 5


class HostError(SpecrigError):
    """This host does not fit what the recipe needs (GPU, driver, memory, disk)."""

    exit_code = 6


class BuildError(SpecrigError):
    """A wheel build failed or cannot start."""

    exit_code = 7


class PatchError(SpecrigError):
    """A patch set does not fit the installed files, or applying it failed."""

    exit_code = 8


class EngineError(SpecrigError):
    """An inference server could not be started, reached or kept alive."""

    exit_code = 9


class BenchError(SpecrigError):
    """A benchmark run could not produce a valid result."""

    exit_code = 10


class ThresholdError(BenchError):
    """A measured figure is below the recipe's threshold or regressed."""

    exit_code = 11


class StudyError(SpecrigError):
    """A study ran, and one of its steps failed (or could not run: a step it reads failed)."""

    exit_code = 12
