"""Count the tokens of texts with a model folder's own tokenizer, as the engine will: its
``tokenizer.json`` through the ``tokenizers`` library (the fast tokenizer transformers builds
from it; a fraction of a second), special tokens included as a completion request adds them.
With ``chat`` (each text one user message through the model's chat template), or a folder
without ``tokenizer.json``: transformers' AutoTokenizer, what vLLM and SGLang load (seconds).

With ``ids`` the token ids themselves (``chat``: the prompt a chat completion sends, for an
endpoint that takes token ids).

usage: python count_tokens.py MODEL_DIR < {"texts": [...], "chat": false, "ids": false}
prints one JSON list: the count (or the ids) of each text, in order."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _fast(folder: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return lambda text: list(tok.encode(text).ids)


def _transformers(folder: Path, chat: bool):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))

    def encode(text: str) -> list[int]:
        if not chat:
            return list(tok(text)["input_ids"])
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    return encode


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    request = json.load(sys.stdin)
    chat, ids = bool(request.get("chat")), bool(request.get("ids"))
    encode = _fast(folder) if not chat and (folder / "tokenizer.json").is_file() else _transformers(folder, chat)
    print(json.dumps([encode(text) if ids else len(encode(text)) for text in request["texts"]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
