"""The one interface every buildable implements, and the context it gets.

A backend turns a resolved :class:`BuildContext` into the environment
variables and PEP 517 config settings of one build, and may edit the build
copy of the source (never the source cache). Everything else (sources, the
cap, the watchdog, the wheelhouse, the lock) is shared in ``session``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from specrig.builder.cap import JobCap
from specrig.builder.definition import BuildDefinition

__all__ = ["Backend", "BuildContext", "local_version_tag"]


@dataclass(frozen=True, kw_only=True)
class BuildContext:
    definition: BuildDefinition
    recipe: str
    archs: tuple[str, ...]
    """nvcc arch numbers (``120``), in the recipe's order."""
    cap: JobCap
    cuda_toolkit: str
    """Toolkit that compiles (``13.0.88``)."""
    torch: str | None
    """``2.9.1+cu128`` for builds against torch, None otherwise."""
    python_tag: str
    local_version: str
    dep_dirs: dict[str, Path]
    """FetchContent name -> unpacked source folder (empty in a plan without a cache)."""


def local_version_tag(template: str, *, archs: tuple[str, ...], cuda_toolkit: str, torch: str | None) -> str:
    """``sm120.cu130.torch291``: names arch, CUDA and torch, so a local build can
    never be mistaken for an upstream wheel (PEP 440 local label: a-z, 0-9, dots)."""
    major_minor = cuda_toolkit.split(".")[:2]
    cuda = "cu" + "".join(major_minor)
    torch_digits = ""
    if torch:
        torch_digits = "".join(torch.split("+")[0].split("."))
    tag = template.format(archs=".sm".join(archs), cuda=cuda, torch=torch_digits)
    return tag.lower()


class Backend(Protocol):
    """How one kind of project is built (``[build].backend`` in its definition)."""

    def check_archs(self, definition: BuildDefinition, archs: tuple[str, ...]) -> None:
        """Raise ConfigError for an arch the project cannot build."""

    def environment(self, ctx: BuildContext) -> dict[str, str]:
        """Environment variables this build sets (shown by --plan)."""

    def config_settings(self, ctx: BuildContext) -> list[str]:
        """PEP 517 config settings, ``key=value`` (shown by --plan)."""

    def prepare_tree(self, ctx: BuildContext, tree: Path) -> list[str]:
        """Edit the build copy of the source; return what was done, one line each."""
