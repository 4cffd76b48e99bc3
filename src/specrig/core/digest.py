"""Content hashes of files, streamed (models and wheels are large)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

__all__ = ["CONFIG_STAMPS", "config_fingerprint", "record_hash", "record_hash_bytes", "sha256_file"]

CONFIG_STAMPS = frozenset({"transformers_version", "dtype", "torch_dtype", "_name_or_path", "use_cache"})
"""Keys of a model's config.json that say how and where it was written, not what the model
is: the converter's version, the dtype it was saved or served in, the folder it came from."""


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


def config_fingerprint(config: bytes | dict) -> str:
    """sha256 of a model config's content (its keys sorted), without :data:`CONFIG_STAMPS`:
    the same model converted by another transformers release or saved in another dtype
    keeps its fingerprint; another architecture, size or vocabulary does not."""
    cfg = json.loads(config) if isinstance(config, bytes) else config
    kept = {k: v for k, v in cfg.items() if k not in CONFIG_STAMPS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
