"""Engine environments: making, verifying and reusing a venv exactly from its lock (:mod:`.make`),
provided interpreters and their drift (:mod:`.provided`), offline bundles (:mod:`.bundle`, fetched by
:mod:`.download`) and kits (:mod:`.kit`, with :mod:`.archives`), and the scripts that run inside an
environment (``inenv/``). Knows no engine."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host", "lock")
