"""Speculative decoding on paper: acceptance, theory, predicted vs measured speedup and the diagnosis
(:mod:`.theory`), distributions and intervals (:mod:`.stats`), the aux-layer convention check
(:mod:`.layers`). Does no I/O beyond reading a drafter's config."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core",)
