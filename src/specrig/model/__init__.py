"""What an engine serves: the model folder (GGUF conversion, :mod:`.folder`), shaped dummy models
(:mod:`.shaped`), drafters (random, or trained and registered, :mod:`.drafters`) and prompt sets
(:mod:`.datasets`). Launches no server."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host", "lock", "env")
