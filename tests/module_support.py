"""Loading a script that is not part of a package (bench/, checks, the trainers' in-env helpers) as
a module, the way its own process imports it: by its file."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_file(path: Path) -> ModuleType:
    """The Python file ``path`` executed as a module named after its stem."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
