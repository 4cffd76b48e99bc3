"""A recipe's Python environments (``[env.NAME]``) and package sources
(``[indexes.NAME]``): part of the recipe model, :mod:`specrig.recipe`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["EnvSpec", "IndexSpec"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvSpec(_Strict):
    """One Python environment (its own lock: ``recipes/RECIPE.ENV.lock``).

    Three kinds: a venv specrig makes from the lock (the default); an existing
    interpreter used as it is (``provided = true``, checked against the lock,
    never modified); or a venv on top of an existing interpreter whose packages
    named in ``host_provides`` are used from it while the rest of the lock is
    installed hash-checked into the venv."""

    requirements: list[str]
    """Top-level requirements, pinned with ``==``."""
    overrides: list[str] = []
    """uv overrides. ``NAME; sys_platform == 'never'`` drops a dependency."""
    find_links: list[str] = []
    """Extra local wheel folders, each a ``$VAR`` (never a path of one machine);
    an unset variable or a missing folder is skipped. Prefer ``[indexes]``."""
    shims: dict[str, str] = {}
    """Extra dist-info shims ``{name: version}`` written into the env after install."""
    provided: bool = False
    """Use an existing interpreter (``python`` or ``--python``) as this environment:
    specrig never installs into it, ``nox -s env -- --check`` reports its drift."""
    python: str | None = None
    """The existing interpreter, as ``$VAR`` or ``$VAR/bin/python`` (expanded when
    used); ``--python PATH`` overrides it."""
    patches: list[str] = []
    """Families of patch sets (``patches/FAMILY/VERSION/``) this environment needs, for the
    versions it pins: making or reusing it applies them; a bench refuses it without them."""
    host_provides: list[str] = []
    """Packages (names or globs such as ``nvidia-*``) the host's interpreter
    provides: flagged ``provided`` in the lock, not installed; the rest goes into
    a venv layered over that interpreter (its site-packages seen through a ``.pth`` file)."""

    @field_validator("requirements")
    @classmethod
    def _pinned(cls, v: list[str]) -> list[str]:
        from packaging.requirements import InvalidRequirement, Requirement

        for line in v:
            try:
                req = Requirement(line)
            except InvalidRequirement as exc:
                raise ValueError(f"not a valid requirement: {line!r} ({exc})") from None
            if not any(s.operator in ("==", "===") for s in req.specifier):
                raise ValueError(f"requirement {line!r} is not pinned: write NAME==VERSION")
        return v

    @field_validator("find_links", "python")
    @classmethod
    def _no_machine_path(cls, v: Any) -> Any:
        for entry in v if isinstance(v, list) else [v] if v else []:
            if not entry.startswith("$"):
                raise ValueError(
                    f"{entry!r} names a path of one machine: write a variable ($NAME) the user sets instead"
                )
        return v

    @property
    def layered(self) -> bool:
        """A venv over an existing interpreter (some packages come from the host)."""
        return bool(self.host_provides) and not self.provided


class IndexSpec(_Strict):
    """A package source other than the default index (``[indexes.NAME]``).

    The URL (or folder) comes from the user's configuration first: the variable
    ``env`` or uv's ``UV_INDEX="NAME=URL"``, or a find-links folder that holds
    the files; else from ``default``, the upstream's documented source."""

    packages: list[str]
    """Packages (names or globs) that come from this source, e.g. ``["torch"]``."""
    env: str
    """Environment variable holding the URL or folder, e.g. ``SPECRIG_INDEX_PYTORCH_CPU``."""
    kind: Literal["index", "find-links"] = "index"
    """``index``: a PEP 503 simple index; ``find-links``: a folder or page of files."""
    about: str = ""
    """What it is, for the hint when it is not configured."""
    default: str | None = None
    """The upstream's documented source (e.g. PyTorch's CPU wheel index for torch +cpu), used only
    where the user's configuration (the variable, ``UV_INDEX``, a find-links folder holding the
    files) does not already provide them. The lock's hashes are the same whichever source serves."""

    @field_validator("env")
    @classmethod
    def _var(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", v):
            raise ValueError(f"expected an environment variable name like SPECRIG_INDEX_X, got {v!r}")
        return v
