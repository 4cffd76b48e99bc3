"""Kernel wheel builds (flash-attn, sgl-kernel) for the recipe's GPU arch:
pinned offline sources, a memory-aware job cap with a watchdog, and a
fingerprinted wheelhouse; each wheel is listed in the built-wheel record
(``specrig.lock.built``) that ``env`` installs from.

Modules: ``definition`` (build/NAME.toml, typed), ``backend`` (the interface)
and ``backends`` (the registry: ``flash_attn``, ``skbuild``), ``plan`` (decide
everything, no side effects), ``render`` (``--plan``), ``execute`` (sources ->
build -> wheelhouse -> record), ``cap`` (the job cap model), ``watchdog``
(memory sampling and guarding), ``progress`` (running and logging), ``sources``
(source cache, hashes, FetchContent parsing), ``wheelhouse`` (fingerprints,
atomic store), ``fatbin`` (which archs a library holds), ``tu_probe`` (one
flash-attn unit measured). The CUDA toolchain probe is ``specrig.host.toolchain``;
the command is ``specrig.cli.build``.
"""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host", "lock")
