"""What is judged before any server starts: the load against the open-file limit and the local
ports (refused), against the engine's batch cap (a warning), and output and prompt lengths
against the model's context (refused), each message naming the limit and where it comes from.
The real command line where it stops before anything is made; the real tokenizer where the
cpu recipe's environment and model are there."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.engine import get_engine
from specrig.host.limits import ConnectionLimits, connection_limits
from specrig.host.machine import Gpu
from specrig.lab.options import BenchOptions
from specrig.lab.plan import workload_from
from specrig.lab.prelaunch import check_connections, check_prompts, context_limit, warn_batch_cap
from specrig.recipe.schema import load_recipe

CPU = load_recipe("cpu")
HOPPER = load_recipe("hopper-sm90")
H100 = Gpu(0, "NVIDIA H100 80GB HBM3", "9.0", 79.6)


def _bench(tmp_path: Path, *argv: str, open_files: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # this process's own limit, lowered (a real RLIMIT_NOFILE, as `ulimit -n` sets)
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return subprocess.run(
        [sys.executable, "-m", "specrig.cli", "bench", "--recipe", "cpu", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        env=os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"},
    )


def test_a_load_over_the_open_file_limit_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--concurrency", "1,2000", "--results", str(tmp_path / "run"), open_files=512)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--concurrency 2000 holds 2,002 connections to the server, one open file each" in said
    assert "this process may open 512 files (ulimit -n, the RLIMIT_NOFILE soft limit;" in said
    assert "Too many open files" in said and "hint: lower the load to at most" in said and "`ulimit -n " in said
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()
    assert not (tmp_path / "cache" / "envs").exists()  # refused before any environment was made


def test_a_load_over_the_local_ports_is_refused(tmp_path: Path) -> None:
    ports = tmp_path / "ip_local_port_range"
    ports.write_text("40000\t40099\n")
    limits = connection_limits(port_range=ports)
    assert limits.local_ports == (40000, 40099) and limits.local_port_count == 100
    wide = ConnectionLimits(None, None, limits.open_now, limits.local_ports)  # no open-file limit in the way
    opts = BenchOptions(concurrency=(1, 200))
    with pytest.raises(ConfigError) as ei:
        check_connections(workload_from(opts, CPU), opts, wide)
    assert "--concurrency 200 holds 202 connections to one server address" in ei.value.message
    assert "the kernel hands out 100 (40000-40099, /proc/sys/net/ipv4/ip_local_port_range)" in ei.value.message
    assert "at most 98 requests in flight" in str(ei.value.hint)
    ok = BenchOptions(concurrency=(98,))
    check_connections(workload_from(ok, CPU), ok, wide)
    # open loop: every prompt may be in flight at once
    rate = BenchOptions(request_rate=(2.0,), num_prompts=500)
    with pytest.raises(ConfigError, match=r"--request-rate 2 \(open loop: all 500 prompts may be in flight\)"):
        check_connections(workload_from(rate, CPU), rate, wide)


def _warned(opts: BenchOptions, recipe=CPU, gpus=(), spec: bool = False) -> str | None:
    with log.console.capture() as captured:
        said = warn_batch_cap(workload_from(opts, recipe), opts, recipe, get_engine(opts.engine), gpus, spec)
    assert (said is None) == ("warning" not in captured.get())
    return said


def test_a_load_over_the_engines_batch_cap_is_warned_with_where_the_cap_comes_from() -> None:
    said = _warned(BenchOptions(concurrency=(1, 16)))
    assert said is not None
    assert "--concurrency 16: 16 requests in flight, and vllm runs at most 8 at once" in said
    assert "(--max-num-seqs 8 in recipe cpu's [engine.vllm] args)" in said
    assert "the other 8 wait in its queue, so their TTFT includes the wait" in said
    assert "--engine-arg=--max-num-seqs=16" in said
    assert _warned(BenchOptions(concurrency=(8,))) is None
    assert _warned(BenchOptions(concurrency=(16,), engine_arg=("--max-num-seqs=32",))) is None  # the last wins
    gpu = _warned(BenchOptions(recipe="hopper-sm90", engine="sglang", concurrency=(32,)), HOPPER, (H100,))
    assert gpu is not None and "(--max-running-requests 16 in recipe hopper-sm90's [engine.sglang] args)" in gpu


def test_vllms_default_batch_cap_follows_the_host() -> None:
    vllm = get_engine("vllm")
    a100 = Gpu(0, "NVIDIA A100-SXM4-80GB", "8.0", 79.2)
    assert vllm.default_batch_cap([], CPU, ())[0] == 128
    assert vllm.default_batch_cap([], HOPPER, (H100,))[0] == 1024
    assert vllm.default_batch_cap([], HOPPER, (a100,))[0] == 256
    assert vllm.default_batch_cap(["--performance-mode", "throughput"], HOPPER, (H100,))[0] == 2048
    assert get_engine("sglang").default_batch_cap([], HOPPER, (H100,)) is None  # sized from its KV cache at start


def test_the_context_comes_from_the_last_flag_else_the_recipe() -> None:
    vllm = get_engine("vllm")
    ctx = context_limit(BenchOptions(), CPU, vllm)
    assert ctx is not None and (ctx.value, ctx.source) == (2048, "max_model_len in recipe cpu's [model]")
    given = context_limit(BenchOptions(engine_arg=("--max-model-len", "4k")), CPU, vllm)
    assert given is not None and (given.value, given.source) == (4000, "--max-model-len 4k in --engine-arg")
    assert context_limit(BenchOptions(engine_arg=("--max-model-len=auto",)), CPU, vllm) is None  # not judged


@pytest.mark.parametrize(
    ("files", "argv", "fragment"),
    [
        (
            {},
            ["--max-tokens", "10000000"],
            "--max-tokens 10000000 asks for 10,000,000 output tokens, and the model's context is 2,048 tokens "
            "(max_model_len in recipe cpu's [model])",
        ),
        (
            {},
            ["--max-tokens", "3000", "--engine-arg=--max-model-len=4096"],
            None,  # a longer context given: accepted here (the run then goes on to make the environment)
        ),
        (
            {"p.jsonl": '{"prompt": "a"}\n{"prompt": "b", "output_len": 5000}\n'},
            ["--dataset", "custom", "--dataset-path", "p.jsonl"],
            "p.jsonl:2 asks for 5,000 output tokens",
        ),
    ],
)
def test_an_output_over_the_context_is_refused_before_anything_is_made(
    tmp_path: Path, files: dict[str, str], argv: list[str], fragment: str | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    if fragment is None:
        from specrig.lab.prelaunch import check_outputs

        opts = BenchOptions(max_tokens=3000, engine_arg=("--max-model-len=4096",))
        check_outputs(workload_from(opts, CPU), opts, context_limit(opts, CPU, get_engine("vllm")))
        return
    proc = _bench(tmp_path, *argv, "--results", str(tmp_path / "run"))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and fragment in said, proc.stderr[-2000:]
    assert "hint:" in said and "Traceback" not in proc.stderr
    assert not (tmp_path / "cache" / "envs").exists() and not (tmp_path / "run").exists()


def _long_file(tmp_path: Path) -> Path:
    f = tmp_path / "mine.jsonl"
    long = "the quick brown fox jumps over the lazy dog. " * 4500  # 202,500 characters
    f.write_text(json.dumps({"prompt": "hello there"}) + "\n" + json.dumps({"prompt": long}) + "\n")
    return f


def test_without_a_tokenizer_a_long_prompt_is_refused_by_a_conservative_bound(tmp_path: Path) -> None:
    """An interpreter that cannot load the tokenizer (specrig's own: no transformers): the bound, said so."""
    opts = BenchOptions(dataset="custom", dataset_path=str(_long_file(tmp_path)))
    w = workload_from(opts, CPU)
    with log.console.capture() as captured, pytest.raises(ConfigError) as ei:
        check_prompts(w, context_limit(opts, CPU, get_engine("vllm")), sys.executable, tmp_path)
    assert "could not be counted with the model's tokenizer" in captured.get()
    assert "at least one token per 8 bytes, a conservative bound" in ei.value.message
    assert f"{tmp_path / 'mine.jsonl'}:2: 25,313 prompt tokens + 512 output = 25,825" in ei.value.message
    assert ":1:" not in ei.value.message  # the short line fits


def _engine_env() -> tuple[Path, Path]:
    python = subdir("envs") / "cpu-vllm" / "bin" / "python"
    models = sorted(subdir("models").glob("SmolLM2-135M-Instruct*-bfloat16"))
    if not python.exists() or not models:
        pytest.skip("needs the cpu recipe's vllm environment and the converted SmolLM2 (made by `nox -s env`, a bench)")
    return python, models[-1]


def test_prompts_are_counted_with_the_models_tokenizer(tmp_path: Path) -> None:
    python, model = _engine_env()
    opts = BenchOptions(dataset="custom", dataset_path=str(_long_file(tmp_path)))
    w = workload_from(opts, CPU)
    ctx = context_limit(opts, CPU, get_engine("vllm"), model)
    with pytest.raises(ConfigError) as ei:
        check_prompts(w, ctx, python, model)
    assert "counted with the model's tokenizer" in ei.value.message
    assert f"{tmp_path / 'mine.jsonl'}:2: 45,001 prompt tokens + 512 output = 45,513" in ei.value.message
    story = BenchOptions(max_tokens=512)
    check_prompts(workload_from(story, CPU), ctx, python, model)  # the story's five fit, with 512 tokens each
    # the longest story prompt is 21 tokens: 2,027 output tokens fill the context exactly, one more does not
    check_prompts(workload_from(BenchOptions(max_tokens=2027), CPU), ctx, python, model)
    with pytest.raises(ConfigError) as ei:
        check_prompts(workload_from(BenchOptions(max_tokens=2028), CPU), ctx, python, model)
    assert ei.value.message.startswith("1 prompt(s) with their output do not fit the model's context of 2,048 tokens")
    assert "story prompt 'n_queens': 21 prompt tokens + 2,028 output = 2,049" in ei.value.message


def test_the_count_is_the_one_the_engine_makes(tmp_path: Path) -> None:
    """The fast path (tokenizer.json through tokenizers) counts as transformers' AutoTokenizer, which
    vLLM loads: the same story prompt, both ways, in the engine's environment."""
    from specrig.model.datasets import STORY_PROMPTS
    from specrig.model.tokens import count_tokens

    python, model = _engine_env()
    texts = [p.text for p in STORY_PROMPTS] + ["", "naïve café — 日本語"]
    code = (
        "import json, sys; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
        "print(json.dumps([len(t(x)['input_ids']) for x in json.load(sys.stdin)]))"
    )
    proc = subprocess.run(
        [str(python), "-c", code, str(model)], input=json.dumps(texts), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert count_tokens(python, model, texts) == json.loads(proc.stdout.strip().splitlines()[-1])
    # --chat: the prompt as a user message through the model's chat template (its system turn included)
    assert (
        count_tokens(python, model, ["Hello there"], chat=True)[0] > count_tokens(python, model, ["Hello there"])[0] + 4
    )


def test_chat_ids_are_the_chat_templates_tokens() -> None:
    """What SGLang's /generate gets for a chat prompt: the ids transformers' chat template makes
    (the model's own, in the engine's environment), as many as the chat count says."""
    from specrig.model.datasets import STORY_PROMPTS
    from specrig.model.tokens import chat_token_ids, count_tokens

    python, model = _engine_env()
    texts = [p.text for p in STORY_PROMPTS[:2]]
    code = (
        "import json, sys; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
        "r = [t.apply_chat_template([{'role': 'user', 'content': x}], add_generation_prompt=True) "
        "for x in json.load(sys.stdin)]; print(json.dumps([list(x['input_ids'] if hasattr(x, 'keys') else x) for x in r]))"
    )
    proc = subprocess.run(
        [str(python), "-c", code, str(model)], input=json.dumps(texts), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ids = chat_token_ids(python, model, texts)
    assert ids == json.loads(proc.stdout.strip().splitlines()[-1])
    assert [len(i) for i in ids] == count_tokens(python, model, texts, chat=True)
