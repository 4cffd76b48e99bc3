"""Hash-pinned locks: resolving a recipe's environment with uv (:mod:`.resolve`), the typed lock file
(:mod:`.file`), where packages come from (:mod:`.indexes`), the built-wheel record (:mod:`.built`) and files
shipped inside hash-pinned packages (:mod:`.packaged`). Installs nothing."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host")
