"""The backend registry: ``[build].backend`` of a definition -> how it is built.

The one place backends are named; definitions are checked against it."""

from __future__ import annotations

from typing import Final

from .backend import Backend
from .flash_attn import FlashAttnBackend
from .skbuild import ScikitBuildBackend

__all__ = ["BACKENDS"]

BACKENDS: Final[dict[str, Backend]] = {
    "setuptools-torch": FlashAttnBackend(),
    "scikit-build-core": ScikitBuildBackend(),
}
