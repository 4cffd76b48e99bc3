"""A model given by its shape (``[model.shape]``, ``load_format = "dummy"``):
a Hugging Face folder holding the ``config.json`` written from the declared
shape and the tokenizer files of another model, and no weights. The engine
serves it with dummy weights: the speed and memory of that size, meaningless
output."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.paths import subdir
from specrig.recipe.schema import ModelSpec

__all__ = ["TOKENIZER_FILES", "shaped_model_dir"]

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)


def shaped_model_dir(spec: ModelSpec, tokenizer_dir: Path) -> Path:
    """The folder for ``spec`` (made once, named by the digest of its config and tokenizer)."""
    if spec.shape is None:
        raise ConfigError(f"model {spec.served_name!r} has no [shape]", hint="give model.shape or another source")
    tokenizer_dir = Path(tokenizer_dir)
    files = [tokenizer_dir / n for n in TOKENIZER_FILES if (tokenizer_dir / n).is_file()]
    if not any(f.name in ("tokenizer.json", "tokenizer.model", "vocab.json") for f in files):
        raise ConfigError(
            f"{tokenizer_dir} holds no tokenizer (tokenizer.json, tokenizer.model or vocab.json)",
            hint="point model.tokenizer at a Hugging Face model folder",
        )
    config = spec.shape.config_json() | {"max_position_embeddings": spec.shape.max_position_embeddings}
    h = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for f in files:
        h.update(f.name.encode() + f.read_bytes())
    out = subdir("models") / f"shaped-{spec.served_name}-{h.hexdigest()[:16]}"
    if (out / "config.json").is_file():
        return out
    tmp = atomic.staging_dir(out)
    try:
        for f in files:
            shutil.copyfile(f, tmp / f.name)
        atomic.write_text(tmp / "config.json", json.dumps(config, indent=2) + "\n")
        # a finished folder another process published first wins; an unfinished leftover is swapped out
        atomic.publish_dir(tmp, out, replace=not (out / "config.json").is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
