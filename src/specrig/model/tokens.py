"""Token counts with the served model's own tokenizer, before any server starts: the model
folder's tokenizer, loaded in the engine's environment as the engine loads it, through
``inenv/count_tokens.py`` (its ``tokenizer.json`` in a fraction of a second; a chat template
through transformers in seconds). No model weights are read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from specrig.core.errors import EnvError

__all__ = ["count_tokens", "chat_token_ids"]

_SCRIPT = Path(__file__).parent / "inenv" / "count_tokens.py"


def count_tokens(python: Path | str, model_dir: Path | str, texts: list[str], *, chat: bool = False) -> list[int]:
    """The tokens of each of ``texts`` (``chat``: as one user message through the chat template);
    EnvError, with the script's last lines, when the tokenizer cannot be loaded or run."""
    return [int(n) for n in _tokenize(python, model_dir, {"texts": texts, "chat": chat})]


def chat_token_ids(python: Path | str, model_dir: Path | str, texts: list[str]) -> list[list[int]]:
    """Each of ``texts`` as one user message through the model's chat template, as token ids: the
    prompt a chat completion sends, for an endpoint that takes token ids (SGLang's ``/generate``)."""
    return [[int(t) for t in ids] for ids in _tokenize(python, model_dir, {"texts": texts, "chat": True, "ids": True})]


def _tokenize(python: Path | str, model_dir: Path | str, request: dict) -> list:
    texts = request["texts"]
    cmd = [str(python), str(_SCRIPT), str(model_dir)]
    environ = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    try:
        proc = subprocess.run(cmd, input=json.dumps(request), capture_output=True, text=True, env=environ, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(
            f"tokenizing with {model_dir}'s tokenizer: {exc}", hint=f"run by hand: {' '.join(cmd)}"
        ) from None
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (IndexError, ValueError):
        out = None
    if not isinstance(out, list) or len(out) != len(texts):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise EnvError(
            f"tokenizing with {model_dir}'s tokenizer failed (exit {proc.returncode}):\n{tail}",
            hint=f'run by hand: {" ".join(cmd)} < a JSON {{"texts": [...]}}',
        )
    return out
