"""The draft-model oracle on an MLA target, replayed from REAL captures (capture/, SOURCES.md): what
``specrig study run studies/2026-12-07-mla-oracle/study.toml`` wrote on a 2-core CPU host. Each step
is checked to have served what it names (the random-weight shapes, the draft as vLLM was given it,
float32 where asked), and the figures the README quotes are re-derived from the raw captures: the
engine's counters (acceptance, mean length) and the answers' token ids against the baseline's."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from specrig.lab.results import RunSummary

CAPTURE = Path(__file__).resolve().parent / "capture"
STEPS = {  # step: (architecture, dtype the servers ran)
    "mla-bf16": ("DeepseekV3ForCausalLM", "bfloat16"),
    "mla-fp32": ("DeepseekV3ForCausalLM", "float32"),
    "llama": ("LlamaForCausalLM", "bfloat16"),
    "mla-native-rope": ("DeepseekV3ForCausalLM", "bfloat16"),
    "mla-native-rope-fp32": ("DeepseekV3ForCausalLM", "float32"),
}
QUOTED = {  # (step, config): acceptance %, mean length, answers identical to the baseline's, first divergences
    ("mla-bf16", "draft_model-k1"): (45.4, 1.45, 0, [2, 2, 5, 1, 4]),
    ("mla-bf16", "draft_model-k3"): (17.5, 1.52, 0, [1, 1, 1, 2, 5]),
    ("mla-fp32", "draft_model-k1"): (42.7, 1.43, 0, [2, 2, 5, 1, 4]),
    ("mla-fp32", "draft_model-k3"): (16.2, 1.49, 0, [1, 1, 1, 2, 3]),
    ("llama", "draft_model-k1"): (100.0, 2.00, 5, [None] * 5),
    ("llama", "draft_model-k3"): (100.0, 4.00, 5, [None] * 5),
    ("mla-native-rope", "draft_model-k1"): (66.3, 1.66, 1, [2, None, 2, 12, 25]),
    ("mla-native-rope", "draft_model-k3"): (59.3, 2.78, 1, [2, None, 2, 12, 25]),
    ("mla-native-rope-fp32", "draft_model-k1"): (68.8, 1.69, 5, [None] * 5),
    ("mla-native-rope-fp32", "draft_model-k3"): (70.4, 3.11, 5, [None] * 5),
}


def captured(step: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((CAPTURE / f"{step}.summary.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def runs() -> dict[str, RunSummary]:
    return {step: captured(step) for step in STEPS}


def _log(step: str, server: str) -> str:
    return gzip.decompress((CAPTURE / f"{step}.server-{server}-r0.log.gz").read_bytes()).decode()


def test_each_step_served_what_it_names(runs: dict[str, RunSummary]) -> None:
    for step, (arch, dtype) in STEPS.items():
        s = runs[step]
        assert s.engine == "vllm" and s.host.gpus == [] and s.workload.dataset == "story"
        assert s.model.startswith("RANDOM WEIGHTS (load_format=random, seed 0") and arch in s.model
        assert all(m.server_generation_tokens == m.completion_tokens for m in s.measurements)  # counters their own
        for server in ("baseline", "draft_model-k1", "draft_model-k3"):
            assert set(re.findall(r"dtype=torch\.(\w+)", _log(step, server))) == {dtype}, (step, server)
        native = [c for c in s.configs if '{"custom_ops": ["-rotary_embedding"]}' in c.server_argv]
        assert len(native) == (len(s.configs) if "native-rope" in step else 0), step  # the kernel off on every server
        for c in s.configs[1:]:
            draft = c.drafter or ""
            # vLLM would read a deepseek_v3 draft as its MTP module: it gets the relabelled copy of the target
            assert draft.endswith("-random-s0") if arch.startswith("Llama") else "-random-s0-as-draft-" in draft


def test_the_oracle_keeps_the_llamas_answers_and_not_the_mla_targets(runs: dict[str, RunSummary]) -> None:
    for (step, config), (rate, length, same, first) in QUOTED.items():
        s = runs[step]
        base = {r.prompt_id: r.token_ids for m in s.measurements if m.config == "baseline" for r in m.requests}
        (m,) = [m for m in s.measurements if m.config == config]
        sc = m.spec_counters
        assert sc is not None and sc.draft_tokens > 0
        assert 100 * sc.accepted_tokens / sc.draft_tokens == pytest.approx(rate, abs=0.05), (step, config)
        assert 1 + sc.accepted_tokens / sc.drafts == pytest.approx(length, abs=0.005), (step, config)
        got = {r.prompt_id: r.token_ids for r in m.requests}
        assert sum(v == base[k] for k, v in got.items()) == same, (step, config)
        where = [
            next((i for i, (a, b) in enumerate(zip(base[k], v, strict=True)) if a != b), None) for k, v in got.items()
        ]
        assert where == first, (step, config)


def test_the_mla_targets_prefill_is_not_causal_and_the_llamas_is() -> None:
    """The causal probe's captures: a position's logprob generated, and read back as a prompt."""

    def diffs(name: str) -> dict[str, float]:
        out = {}
        name = name.replace("-native-rope", "-fp32-native-rope") if "native" in name else f"{name}-fp32"
        for line in (CAPTURE / f"causal-probe-{name}.txt").read_text().splitlines():
            if m := re.fullmatch(
                r"(\w+) token (\d+): \d+ logprob (-?[\d.]+) generated, (-?[\d.]+) as a prompt \(.*\)", line
            ):
                out[f"{m[1]}:{m[2]}"] = abs(float(m[3]) - float(m[4]))
        return out

    llama, mla, native = diffs("llama-tiny"), diffs("mla-tiny"), diffs("mla-tiny-native-rope")
    assert len(llama) == len(mla) == len(native) == 20
    assert max(llama.values()) < 1e-4 and max(native.values()) < 1e-4  # vLLM's rotary kernel off: causal again
    assert max(mla.values()) == pytest.approx(1.8692, abs=1e-4)
    assert (
        sum(v > 1e-3 for k, v in mla.items() if k.endswith(":0")) >= 4
    )  # prefill against prefill, from the first token


def test_the_cpu_rotary_kernel_is_right_only_on_a_contiguous_2d_query() -> None:
    got = {}
    for line in (CAPTURE / "rope-kernel-check.txt").read_text().splitlines():
        label, _, rest = line.partition(": ")
        got[label] = [float(x) for x in re.findall(r"(?:query|key) ([\d.]+)", rest)]
    assert got["strided 3-D views (as MLA gives them)"] == [6.8508, 5.8271]
    assert got["contiguous 3-D [tokens, heads, rope]"] == [6.8508, 0.0]
    assert got["contiguous 2-D [tokens, heads * rope] (a Llama's layout)"] == [0.0]
