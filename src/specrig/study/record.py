"""What a study folder records of its steps, written atomically after every change:
``state.json`` (per step: status, the digest of its inputs and of its outputs, start, end, exit
status, what it made) and, at the end of a run, ``manifest.json`` (what ran, where, with which
specrig). A step's inputs are its command's argv as written, its recipe's digest and its locks'
digests, and the outcome of every earlier step it reads; its outputs are the files it made
(names, sizes, modification times). A rerun skips a step whose inputs and outputs are both
unchanged."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from specrig.core import atomic
from specrig.core.errors import ConfigError

__all__ = [
    "PLAN_FILE",
    "StepRecord",
    "StudyState",
    "STATE",
    "MANIFEST",
    "digest_of",
    "tree_digest",
    "specrig_build",
    "now",
]

STATE = "state.json"
MANIFEST = "manifest.json"
PLAN_FILE = "plan.json"
"""The steps in order (names, commands), written when a run starts: what status counts."""

Status = Literal["running", "done", "failed", "interrupted", "blocked"]


class StepRecord(BaseModel):
    """One step's last run."""

    model_config = ConfigDict(extra="ignore")

    name: str
    command: str
    status: Status
    argv: list[str] = []
    """the whole command as it ran (``step:NAME`` resolved)"""
    inputs_digest: str = ""
    inputs: dict[str, Any] = {}
    outputs_digest: str = ""
    output: str | None = None
    """what ``step:NAME`` names: the results or report folder, or the drafter the step registered"""
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    note: str = ""
    pid: int | None = None

    @property
    def outcome(self) -> str:
        """What a step that reads this one records of it (changes whenever this one ran again)."""
        return digest_of({"inputs": self.inputs_digest, "outputs": self.outputs_digest})


class StudyState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    study: str
    steps: dict[str, StepRecord] = {}

    @classmethod
    def load(cls, folder: Path, name: str) -> StudyState:
        path = folder / STATE
        if not path.is_file():
            return cls(study=name)
        try:
            state = cls.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read the study state {path}: {exc}",
                hint="remove it to run every step again, or name another folder: --out DIR",
            ) from None
        if state.study != name:
            raise ConfigError(
                f"{folder} holds study {state.study!r}, not {name!r}",
                hint="name another folder (--out DIR), or the study that folder holds",
            )
        return state

    def save(self, folder: Path) -> None:
        atomic.write_json(folder / STATE, self.model_dump(mode="json"))

    def put(self, folder: Path, record: StepRecord) -> None:
        self.steps[record.name] = record
        self.save(folder)


def digest_of(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def tree_digest(path: Path | None) -> str:
    """Digest of a file or folder as listed (relative names, sizes, modification times; the bytes
    are not read: a drafter's weights are large); "" when there is nothing there."""
    if path is None or not path.exists():
        return ""
    if path.is_file():
        st = path.stat()
        return digest_of([[path.name, st.st_size, st.st_mtime_ns]])
    rows = []
    for p in sorted(path.rglob("*")):
        if p.is_file():
            st = p.stat()
            rows.append([p.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns])
    return digest_of(rows)


def now() -> float:
    return time.time()


def specrig_build() -> dict[str, Any]:
    """specrig's version and, in a git checkout, its commit (and whether the tree had changes)."""
    from specrig import __version__
    from specrig.core.paths import repo_root

    out: dict[str, Any] = {"version": __version__, "commit": None}
    root = repo_root()
    if (root / ".git").exists():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            git = ["git", "-C", str(root)]
            env = os.environ | {"GIT_OPTIONAL_LOCKS": "0"}
            out["commit"] = subprocess.run(
                [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True, env=env
            ).stdout.strip()
            dirty = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
                env=env,
            )
            out["dirty"] = bool(dirty.stdout.strip())
    return out
