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

__all__ = ["count_tokens"]

_SCRIPT = Path(__file__).parent / "inenv" / "count_tokens.py"


def count_tokens(python: Path | str, model_dir: Path | str, texts: list[str], *, chat: bool = False) -> list[int]:
    """The tokens of each of ``texts`` (``chat``: as one user message through the chat template);
    EnvError, with the script's last lines, when the tokenizer cannot be loaded or run."""
    cmd = [str(python), str(_SCRIPT), str(model_dir)]
    environ = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    try:
        proc = subprocess.run(
            cmd,
            input=json.dumps({"texts": texts, "chat": chat}),
            capture_output=True,
            text=True,
            env=environ,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(
            f"counting tokens with {model_dir}'s tokenizer: {exc}", hint=f"run by hand: {' '.join(cmd)}"
        ) from None
    try:
        counts = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (IndexError, ValueError):
        counts = None
    if not isinstance(counts, list) or len(counts) != len(texts):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise EnvError(
            f"counting tokens with {model_dir}'s tokenizer failed (exit {proc.returncode}):\n{tail}",
            hint=f'run by hand: {" ".join(cmd)} < a JSON {{"texts": [...]}}',
        )
    return [int(n) for n in counts]
