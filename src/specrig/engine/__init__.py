"""Engine adapters, one module each, behind :class:`~specrig.engine.base.Engine`."""

from __future__ import annotations

import importlib

from specrig.core.errors import ConfigError
from specrig.core.registry import ENGINES
from specrig.engine.base import Engine

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host")

__all__ = ["get_engine", "ENGINE_MODULES"]

ENGINE_MODULES = {name: f"specrig.engine.{name}" for name in ENGINES}
"""One adapter module per engine of the registry, named after it."""


def get_engine(name: str) -> Engine:
    if name not in ENGINE_MODULES:
        raise ConfigError(f"unknown engine {name!r}", hint=f"engines: {', '.join(ENGINE_MODULES)}")
    return importlib.import_module(ENGINE_MODULES[name]).ENGINE
