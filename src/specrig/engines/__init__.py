"""Engine adapters, one module each, behind :class:`~specrig.engines.base.Engine`."""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Engine

__all__ = ["get_engine", "ENGINE_MODULES"]

ENGINE_MODULES = {"vllm": "specrig.engines.vllm", "sglang": "specrig.engines.sglang"}


def get_engine(name: str) -> Engine:
    if name not in ENGINE_MODULES:
        raise ConfigError(f"unknown engine {name!r}", hint=f"engines: {', '.join(ENGINE_MODULES)}")
    return importlib.import_module(ENGINE_MODULES[name]).ENGINE
