"""The backend registry: ``[build].backend`` of a definition -> how it is built.

The one place backends are named; definitions are checked against it."""

from __future__ import annotations

from typing import Final

from specrig.build.backend import Backend
from specrig.build.flash_attn import FlashAttnBackend
from specrig.build.skbuild import ScikitBuildBackend

__all__ = ["BACKENDS"]

BACKENDS: Final[dict[str, Backend]] = {
    "setuptools-torch": FlashAttnBackend(),
    "scikit-build-core": ScikitBuildBackend(),
}
