"""Where specrig keeps what it makes: outside the repository, in a user cache
folder (``$SPECRIG_CACHE_DIR``, else ``$XDG_CACHE_HOME/specrig``, else
``~/.cache/specrig``). Every sub-folder can be overridden by its own variable."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "env_dir", "repo_root", "recipes_dir", "subdir"]

_OVERRIDES = {
    "envs": "SPECRIG_ENVS_DIR",
    "wheelhouse": "SPECRIG_WHEELHOUSE",
    "sources": "SPECRIG_SOURCE_CACHE",
    "models": "SPECRIG_MODELS_DIR",
    "results": "SPECRIG_RESULTS_DIR",
    "build-logs": "SPECRIG_BUILD_LOGS",
    "studies": "SPECRIG_STUDIES_DIR",
}


def cache_dir() -> Path:
    if env := os.environ.get("SPECRIG_CACHE_DIR"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specrig"


def subdir(name: str) -> Path:
    """A named cache sub-folder (created on first use)."""
    var = _OVERRIDES.get(name)
    path = Path(os.environ[var]).expanduser() if var and os.environ.get(var) else cache_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def env_dir(recipe: str, env: str) -> Path:
    """The virtual environment ``env`` of ``recipe`` (made by ``specrig env``, built in by ``specrig build``)."""
    return subdir("envs") / f"{recipe}-{env}"


def repo_root() -> Path:
    """The specrig checkout (recipes/, build/, patches/ live there)."""
    if env := os.environ.get("SPECRIG_ROOT"):
        return Path(env)
    return Path(__file__).resolve().parents[3]


def recipes_dir() -> Path:
    return repo_root() / "recipes"
