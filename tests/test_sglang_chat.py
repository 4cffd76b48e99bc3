"""Chat traffic on SGLang's speculative configurations: its per-request speculative stats come only
from its native ``/generate``, which takes no messages, so specrig renders each prompt through the
model's chat template with the model's own tokenizer (in the engine's environment) and sends the
token ids: the same tokens a chat completion sends. Every configuration of such a run, the baseline
included, goes the same way, so a pair compares the same prompt."""

from __future__ import annotations

import argparse

import pytest

from specrig.core.errors import ConfigError
from specrig.core.prompt import Prompt, cycle_prompts
from specrig.engine import get_engine
from specrig.lab.measure import _request_builder
from specrig.lab.options import BenchOptions, declare
from specrig.lab.plan import _checked
from specrig.recipe.schema import load_recipe

SGLANG = get_engine("sglang")
CHAT = Prompt("p", "Hello there", 32, input_ids=(1, 9690, 198, 19556, 2))


def _opts(*argv: str) -> BenchOptions:
    p = argparse.ArgumentParser()
    declare(p.add_argument)
    return BenchOptions.collect(lambda name, ns=p.parse_args(list(argv)): getattr(ns, name))


def test_chat_on_sglang_speculation_is_planned_and_refused_only_attached() -> None:
    recipe = load_recipe("hopper-sm90")
    argv = ("--engine", "sglang", "--spec", "ngram", "--chat", "--dataset", "sharegpt", "--max-tokens", "64")
    assert _checked(_opts(*argv), recipe).workload.chat
    with pytest.raises(ConfigError) as exc:
        _checked(_opts(*argv, "--endpoint", "http://127.0.0.1:9"), recipe)
    assert "takes the chat template's rendering as token ids" in exc.value.message
    assert "leave out --endpoint" in exc.value.hint


@pytest.mark.parametrize("speculative", [False, True])
def test_every_configuration_sends_the_rendered_ids_to_generate(speculative: bool) -> None:
    spec = load_recipe("hopper-sm90").spec["ngram"] if speculative else None
    build = _request_builder(SGLANG, spec, {}, "m", ignore_eos=False, chat=True)
    path, body = build(CHAT, 32)
    assert path == "/generate" and body["input_ids"] == list(CHAT.input_ids) and "text" not in body
    assert body["sampling_params"] == {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": False}
    # a prompt that was not rendered (a warm-up's) goes to the chat completions
    path, body = build(Prompt("w", "Hi", 16), 16)
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": "Hi"}]


def test_raw_text_is_unchanged() -> None:
    spec = load_recipe("hopper-sm90").spec["ngram"]
    assert _request_builder(SGLANG, None, {}, "m", ignore_eos=True)(CHAT, 8)[0] == "/v1/completions"
    path, body = _request_builder(SGLANG, spec, {}, "m", ignore_eos=True)(CHAT, 8)
    assert path == "/generate" and body["text"] == "Hello there" and "input_ids" not in body


def test_cycled_prompts_keep_their_ids() -> None:
    again = cycle_prompts([CHAT], 2)[1]
    assert again.id == "p#1" and again.input_ids == CHAT.input_ids and again.output_len == 32
