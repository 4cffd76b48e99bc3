"""Serving, seen from the bench: the server process (launch, attach, health, death and stall watch,
:mod:`.server`), the streaming load generator (:mod:`.client`, its transport :mod:`.http`, its types
:mod:`.types`; its progress is the log's bar) and a synthetic SSE server (:mod:`.synthetic`).
Knows no speculative-decoding theory."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "engine")
