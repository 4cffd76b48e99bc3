"""Patch sets for engine environments: versioned, verified, atomic, with provenance.

``patches/<family>/<version>/`` holds a ``series``, a ``set.toml`` (version and
the released wheel's RECORD hash of every target) and one ``*.patch`` per
concern with a DEP-3-style header. :mod:`.apply` checks, applies (all or
none), reverts and reports; :mod:`.stamp` writes the applied stamp and the
``vllm.general_plugins`` guard that verifies it in every vLLM process;
:mod:`.cli` is ``specrig patch``.
"""

__all__: list[str] = []
