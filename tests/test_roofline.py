"""The roofline, derived: bytes per decoded token from the served model, the
devices' bandwidth from the table or measured here, and what the fraction means."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from specrig.host.bandwidth import gpu_bandwidth, measure_host_copy_gb_s
from specrig.host.machine import Gpu, Host
from specrig.lab.results import Distribution, LoadPoint, Measurement, RequestRecord, RooflineInputs
from specrig.lab.roofline import roofline_inputs, rooflines
from specrig.model.weights import weight_read, weight_read_from_config
from specrig.recipe.schema import load_recipe


def test_the_story_host_from_its_declared_shape() -> None:
    """Kimi-K2.5 on 8 RTX PRO 6000s: ~1T parameters, ~32B active, ~31.7 GB a token with INT4 experts;
    8 x 1.79 TB/s bounds one stream at ~450 tok/s, so the story's 82.5 tok/s is ~18% of it."""
    recipe = load_recipe("blackwell-sm120")
    shape = recipe.models["kimi-shape"].shape
    assert shape is not None
    w = weight_read_from_config(shape.config_json(), expert_bits=shape.expert_bits)
    assert 1.0e12 < w.total_params < 1.05e12 and 31e9 < w.active_params < 33e9
    assert 31.0 < w.weight_gb < 32.5
    assert w.kv_bytes_per_token == 61 * (512 + 64) * 2  # MLA caches the latent and the rope key
    bw = gpu_bandwidth("NVIDIA RTX PRO 6000 Blackwell Server Edition", 8)
    assert bw is not None and bw.gb_s == 8 * 1792
    bound = bw.gb_s / w.weight_gb
    assert 440 < bound < 465 and 0.17 < 82.5 / bound < 0.19
    # served as the checkpoint stores them (quantize_experts): config.json's quantization_config
    # gives the same width; bf16 experts would read about twice as much
    assert shape.quantize_experts and weight_read_from_config(shape.config_json()).weight_gb == w.weight_gb
    bf16 = shape.model_copy(update={"quantize_experts": False, "expert_bits": None})
    assert "quantization_config" not in bf16.config_json()
    assert weight_read_from_config(bf16.config_json()).weight_gb > 1.9 * w.weight_gb


@pytest.mark.parametrize(
    ("name", "gb_s"),
    [
        ("NVIDIA H200", 4800),
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA L40S", 864),
        ("NVIDIA B200", 8000),
        ("Some Future GPU", None),
    ],
)
def test_bandwidth_by_the_name_the_driver_reports(name: str, gb_s: float | None) -> None:
    got = gpu_bandwidth(name)
    assert (got.gb_s if got else None) == gb_s


def test_this_hosts_copy_bandwidth_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of n bytes reads n and writes n: bandwidth = 2 n / the fastest of the repeats. The clock is
    scripted (copies of 4, 2 and 3 ms), so the figure is known: 2 x 1 MiB / 2 ms = 1.048576 GB/s."""
    from types import SimpleNamespace

    from specrig.host import bandwidth

    ticks = iter([0.0, 0.004, 10.0, 10.002, 20.0, 20.003])  # (start, end) of each repeat's copy
    monkeypatch.setattr(bandwidth, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    b = measure_host_copy_gb_s(size_mib=1, repeats=3)
    assert b.gb_s == pytest.approx(1.048576)
    assert b.source == "this host's memory, measured: 1.0 GB/s (a 1 MiB copy, read + write)"
    assert next(ticks, None) is None  # one timed copy per repeat, no more, no fewer
    monkeypatch.undo()  # on the real clock: a finite, positive figure (how large is the host's business)
    assert 0 < measure_host_copy_gb_s(size_mib=1, repeats=1).gb_s < float("inf")


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A file in the safetensors layout: u64 header length, JSON header, then the data (zeros)."""
    size = {"BF16": 2, "F32": 4, "I32": 4}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_headers_count_what_a_token_reads(tmp_path: Path) -> None:
    """Two experts, one active: half the expert bytes; the embedding is a look-up when the head is its own."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 4,
                "hidden_size": 8,
                "n_routed_experts": 2,
                "num_experts_per_tok": 1,
            }
        )
    )
    _safetensors(
        tmp_path / "model.safetensors",
        {
            "model.embed_tokens.weight": ("BF16", [100, 8]),
            "lm_head.weight": ("BF16", [100, 8]),
            "model.layers.0.mlp.experts.0.up_proj.weight": ("BF16", [16, 8]),
            "model.layers.0.mlp.experts.1.up_proj.weight": ("BF16", [16, 8]),
            "model.layers.0.mlp.shared_experts.up_proj.weight": ("BF16", [16, 8]),
        },
    )
    w = weight_read(tmp_path)
    assert w is not None and w.total_params == 100 * 8 * 2 + 16 * 8 * 3
    assert w.weight_bytes_per_token == 2 * (100 * 8 + 16 * 8 + 16 * 8)  # head + one expert + shared
    assert w.kv_bytes_per_token == 1 * 2 * 1 * 4 * 2 and "2 tensors" not in w.source and "5 tensors" in w.source


def _baseline(c: int, rate: float, prompt: int, out: int) -> Measurement:
    recs = [
        RequestRecord(
            prompt_id=f"p{i}",
            ttft_ms=1,
            tpot_ms=1,
            e2e_ms=1,
            decode_tok_s=rate,
            completion_tokens=out,
            prompt_tokens=prompt,
        )
        for i in range(c)
    ]
    d = Distribution.of([rate] * c)
    lat = Distribution.of([1.0])
    from specrig.lab.results import Latency

    return Measurement(
        config="baseline",
        point=LoadPoint(concurrency=c),
        repeat=0,
        requests=recs,
        wall_s=1.0,
        completion_tokens=out * c,
        output_tok_s=out * c,
        decode_tok_s=d,
        latency=Latency(ttft_ms=lat, tpot_ms=lat, itl_ms=lat, e2e_ms=lat),
    )


def test_the_bound_at_each_batch_reads_the_kv_cache_too() -> None:
    inputs = RooflineInputs(weight_gb_per_token=14.4, kv_bytes_per_token=131072, bandwidth_gb_s=4800, device="GPU")
    r1, r8 = rooflines(inputs, [_baseline(1, 210, 100, 256), _baseline(8, 200, 100, 256)])
    ctx = 100 + 128
    assert r1.context_tokens == ctx and r1.bound_tok_s == pytest.approx(4800 / (14.4 + ctx * 131072 / 1e9))
    assert r8.batch == 8 and r8.kv_gb_per_step == pytest.approx(8 * ctx * 131072 / 1e9)
    assert r8.bound_tok_s < r1.bound_tok_s
    assert "bandwidth-bound" in r1.reading and r1.fraction == pytest.approx(210 / r1.bound_tok_s)
    slow = rooflines(inputs, [_baseline(1, 10, 100, 256)])[0]
    assert "host-bound" in slow.reading and "GPU idles" in slow.reading
    assert "roofline at batch 8" in r8.line() and "KV" in r8.line()
    assert rooflines(RooflineInputs(bandwidth_gb_s=1.0), [_baseline(1, 1, 1, 2)]) == []  # weights unknown: none


def test_inputs_for_a_run_on_an_h200_and_on_this_cpu() -> None:
    hopper = load_recipe("hopper-sm90")
    h200 = Host(cpus=16, memory_gib=128.0, available_memory_gib=120.0, gpus=(Gpu(0, "NVIDIA H200", "9.0", 140.0),))
    i = roofline_inputs(hopper, "llama8b", None, h200)  # the declared 8B shape: 7.2 B params read as bf16
    assert i.bandwidth_gb_s == 4800 and 14.0 < (i.weight_gb_per_token or 0) < 14.8 and i.device == "GPU"
    assert roofline_inputs(hopper, "llama8b", None, h200, bandwidth_gb_s=4000).bandwidth_gb_s == 4000  # the option wins
    cpu = load_recipe("cpu")
    here = Host(cpus=2, memory_gib=24.0, available_memory_gib=20.0)
    c = roofline_inputs(cpu, None, None, here)
    assert c.device == "CPU" and (c.bandwidth_gb_s or 0) > 0.5 and "measured" in c.bandwidth_source


def test_a_shaped_folder_holds_what_its_config_makes_the_engine_hold(tmp_path):
    """The launch-ahead sizing reads a dummy-weight folder's memory from its config: all 384 experts,
    not the 8 a token reads (two 4-layer servers share the GPU, an 8-layer one starts alone)."""
    from specrig.lab.servers import _weights_gib

    recipe = load_recipe("hopper-sm90")
    for name, low, high in (("kimi-4l", 29, 31), ("kimi-8l", 61, 63)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(recipe.model_named(name).shape.config_json()))
        assert low < _weights_gib(str(d)) < high
        read = weight_read(d)
        assert read is not None and read.weight_gb < read.total_bytes / 1e9 / 4
