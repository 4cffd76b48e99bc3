"""Workload prompt sets: the story's prompts, ShareGPT (the real packaged file,
and a cut-short copy of its layout), random prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.core.prompt import Prompt
from specrig.model.datasets import (
    STORY_PROMPTS,
    fit_to_context,
    load_sharegpt,
    random_prompts,
    read_sharegpt,
    sharegpt_file,
    story_prompts,
)


def _conv(i: int, human: str = "", gpt: str = "", first: str = "human") -> dict:
    second = "gpt" if first == "human" else "human"
    return {
        "id": f"c{i}",
        "conversations": [
            {"from": first, "value": human or f"question {i}"},
            {"from": second, "value": gpt or f"answer {i} " * 3},
        ],
    }


def _cut_file(tmp_path: Path, n: int = 60) -> Path:
    """ShareGPT's layout, cut mid-record like the packaged file."""
    recs = [_conv(i) for i in range(n)] + [_conv(n, first="gpt"), {"id": "empty", "conversations": []}]
    p = tmp_path / "sharegpt.json"
    cut = json.dumps(recs + [_conv(999)], indent=2)
    p.write_text(cut[: cut.rindex('"answer 999')])  # ends inside the last record
    return p


def test_story_prompts_cycle_with_unique_ids() -> None:
    assert story_prompts() == list(STORY_PROMPTS)
    ids = [p.id for p in story_prompts(12)]
    assert len(ids) == 12 and len(set(ids)) == 12 and ids[5] == "relativity#1"


def test_cut_sharegpt_file_is_read_to_its_last_whole_record(tmp_path: Path) -> None:
    convs = read_sharegpt(_cut_file(tmp_path))
    assert [c.id for c in convs] == [f"c{i}" for i in range(60)]  # gpt-first and empty ones skipped, cut one dropped
    assert convs[3].human == "question 3" and convs[3].gpt.startswith("answer 3")


def test_sampling_is_seeded_split_disjoint_and_named(tmp_path: Path) -> None:
    path = _cut_file(tmp_path)
    a = load_sharegpt(10, seed=1, split="train", path=path)
    assert a == load_sharegpt(10, seed=1, split="train", path=path)
    assert a != load_sharegpt(10, seed=2, split="train", path=path)
    held = {p.id for p in load_sharegpt(2, seed=0, split="heldout", path=path)}
    train = {p.id for p in load_sharegpt(40, seed=0, split="train", path=path)}
    assert held and not held & train
    assert all(p.reference and p.output_len is None for p in a)
    with pytest.raises(ConfigError, match="fewer than --num-prompts 500"):
        load_sharegpt(500, path=path)


def test_fit_to_context_uses_answer_lengths_or_fixed_max_tokens() -> None:
    words = lambda s: len(s.split())  # noqa: E731 - a stand-in tokenizer
    ps = [
        Prompt("a", "one two three four", None, "x " * 10),
        Prompt("b", "hi", None, "x " * 10),
        Prompt("c", "one two three four five", None, "x " * 100),
    ]
    kept = fit_to_context(ps, words, max_model_len=50, max_tokens=None)
    assert [(p.id, p.output_len) for p in kept] == [("a", 10)]  # b: prompt too short, c: over the context
    kept = fit_to_context(ps, words, max_model_len=50, max_tokens=8)
    assert [(p.id, p.output_len) for p in kept] == [("a", 8), ("c", 8)]


def test_random_prompts_have_set_lengths() -> None:
    ps = random_prompts(4, input_words=32, output_len=16, seed=3)
    assert [len(p.text.split()) for p in ps] == [32] * 4 and {p.output_len for p in ps} == {16}
    assert ps == random_prompts(4, input_words=32, output_len=16, seed=3)


@pytest.mark.network
def test_real_sharegpt_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path))
    path = sharegpt_file()
    convs = read_sharegpt(path)
    assert len(convs) > 10_000
    ps = load_sharegpt(40, seed=0)
    assert len({p.id for p in ps}) == 40
    assert sharegpt_file() == path  # cached
