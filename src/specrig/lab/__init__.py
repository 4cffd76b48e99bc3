"""The bench's library side: typed options (:mod:`.options`), the plan (:mod:`.plan`), the lab that runs
servers and measures (:mod:`.measure`), rounds (:mod:`.rounds`), typed results (:mod:`.results`), pairing and
the summary (:mod:`.summary`), and the pytest plugin object (:mod:`.plugin`) that ``specrig bench`` hands to
``pytest.main`` and ``pytest bench/`` loads. Renders nothing itself."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = (
    "core",
    "recipe",
    "host",
    "lock",
    "env",
    "patches",
    "model",
    "engine",
    "serve",
    "specdec",
)
