"""The typed recipe (``recipes/NAME.toml``): its hosts, ``[env.*]``, ``[engine.*]``, ``[model]`` /
``[models.*]``, ``[spec.*]`` and ``[bench]`` tables, loaded with dotted-key errors. Runs nothing."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core",)
