"""Patch sets for engine environments: versioned, verified, atomic, with provenance.

``patches/<family>/<version>/`` holds a ``series``, a ``set.toml`` (version and
the released wheel's RECORD hash of every target) and one ``*.patch`` per
concern with a DEP-3-style header. Modules, in the order they are used:

* :mod:`.model`: the set, its patches and headers, validated (pydantic, dotted-key errors);
* :mod:`.record`: installed distributions and RECORD hashes (importlib.metadata);
* :mod:`.which_sets`: which set fits an environment (recipe pins or what is installed), ``status``;
* :mod:`.assess`: where one set stands in one site-packages (a :class:`.state.State`);
* :mod:`.transaction`: stage with ``git apply``, commit all or nothing;
* :mod:`.apply`: check / apply / revert, returning :class:`.state.PatchRun`;
* :mod:`.stamp`: the typed applied stamp and the guard distribution;
* :mod:`.guard_plugin`: the ``vllm.general_plugins`` guard (standard library only);
* :mod:`.state`: the typed results. ``specrig.cli.patch`` renders them.
"""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe")


__all__: list[str] = []
