"""Tables, markdown and PNGs of a run (:mod:`.render`, :mod:`.plots`), and runs side by side. Measures nothing."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "specdec", "lab")
