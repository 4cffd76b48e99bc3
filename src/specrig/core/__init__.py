"""The foundation every room stands on: the exception family (message, hint, exit code), the rich
logger, the user cache folders, streamed sha256, the one atomic-write helper, speculative-decoding
counts as plain data, and how a file failing its typed model is reported (dotted keys)."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ()
