"""Kernel wheel builds (flash-attn, sgl-kernel) for the recipe's GPU arch:
pinned offline sources, a memory-aware job cap with a watchdog, and a
fingerprinted wheelhouse that the recipe's lock records.

Modules: ``definition`` (build/NAME.toml), ``cap`` (the job cap model),
``watchdog`` (memory sampling and guarding), ``progress`` (running and logging),
``sources`` (source cache, hashes, FetchContent parsing), ``wheelhouse``
(fingerprints, atomic store), ``backend`` (the interface), ``flash_attn`` and
``skbuild`` (the backends), ``fatbin`` (which archs a library holds),
``session`` (one build end to end), ``cli`` (``specrig build``).
"""
