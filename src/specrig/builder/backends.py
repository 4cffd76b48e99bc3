"""The backend registry: ``[build].backend`` of a definition -> how it is built.

The names are declared with the definition (``definition.BACKEND_NAMES``, so reading a
definition imports no backend); this maps each to its implementation."""

from __future__ import annotations

from typing import Final

from specrig.builder.backend import Backend
from specrig.builder.definition import BACKEND_NAMES
from specrig.builder.flash_attn import FlashAttnBackend
from specrig.builder.skbuild import ScikitBuildBackend

__all__ = ["BACKENDS"]

BACKENDS: Final[dict[str, Backend]] = {
    "setuptools-torch": FlashAttnBackend(),
    "scikit-build-core": ScikitBuildBackend(),
}

if tuple(BACKENDS) != BACKEND_NAMES:  # pragma: no cover - a registry out of step with its names
    raise ImportError(f"build backends {tuple(BACKENDS)} != the declared names {BACKEND_NAMES}")
