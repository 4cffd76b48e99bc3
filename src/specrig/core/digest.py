"""Content hashes of files, streamed (models and wheels are large)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

__all__ = ["record_hash", "record_hash_bytes", "sha256_file"]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def record_hash_bytes(data: bytes) -> str:
    """A sha256 in the form wheel RECORD files use: ``sha256=<urlsafe base64, no padding>``."""
    return _record_form(hashlib.sha256(data).digest())


def record_hash(path: Path) -> str | None:
    """RECORD-form sha256 of a file, streamed; None when the file does not exist."""
    try:
        with open(path, "rb") as f:
            return _record_form(hashlib.file_digest(f, "sha256").digest())
    except FileNotFoundError:
        return None


def _record_form(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
