"""flash-attn against torch's SDPA on the GPU, run in the build environment with the built wheel
on ``sys.path`` (``specrig build flash-attn --check``). Standard library and torch only.

    python flash_attn_sdpa.py --json OUT.json [--device cpu]

Each case (dtype, head dim, causal or not) runs forward and backward. The reference is torch's
``scaled_dot_product_attention`` in fp32 on the same inputs. flash-attn passes a case when its max
error, output and each gradient, is at most twice the larger of what torch's SDPA in the same low
dtype and plain attention in it (matmuls in that dtype, softmax in fp32, as flash-attn's own tests
compute it) make against that reference, plus 1e-5. Then one timed shape
(bf16, causal, head dim 128, 4k tokens): flash-attn and torch's SDPA, forward and forward+backward.
Exit 0 when every case passes, 1 when one fails, 2 when it cannot run (no torch, no CUDA device).
``--device cpu`` is for testing the checker itself against a stand-in ``flash_attn`` (no timing)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile

CASES = [(dt, d, c) for dt in ("bfloat16", "float16") for d in (64, 128, 256) for c in (False, True)]
BATCH, SEQLEN, HEADS = 2, 777, 8  # 777: not a multiple of any block size, so the edges are tested
FACTOR, ATOL = 2.0, 1e-5
DEVICE = "cuda"


def _attention_lowp(q, k, v, causal):
    """Plain attention in q's dtype (softmax in fp32), (B, H, S, D) layout."""
    import torch

    s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


def _grads(fn, q, k, v, dout):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    return [out.detach(), q.grad, k.grad, v.grad]


def run_case(torch, flash_attn_func, dtype_name, hdim, causal):
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    g = torch.Generator(device=DEVICE).manual_seed(hdim * 2 + causal)
    shape = (BATCH, SEQLEN, HEADS, hdim)  # flash-attn's layout; SDPA's is (B, H, S, D)
    q, k, v, dout = (torch.randn(shape, device=DEVICE, dtype=dtype, generator=g) for _ in range(4))

    def sdpa(q, k, v):
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal)
        return out.transpose(1, 2)

    def plain(q, k, v):
        return _attention_lowp(*(t.transpose(1, 2) for t in (q, k, v)), causal).transpose(1, 2)

    ref = _grads(sdpa, *(t.float() for t in (q, k, v)), dout.float())
    got = {
        "flash": _grads(lambda q, k, v: flash_attn_func(q, k, v, causal=causal), q, k, v, dout),
        "plain": _grads(plain, q, k, v, dout),
        "sdpa": _grads(sdpa, q, k, v, dout),
    }
    row = {"dtype": dtype_name, "hdim": hdim, "causal": causal, "batch": BATCH, "seqlen": SEQLEN, "heads": HEADS}
    ok = True
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        err = {who: (t[i].float() - ref[i]).abs().max().item() for who, t in got.items()}
        limit = FACTOR * max(err["plain"], err["sdpa"]) + ATOL
        row[name] = {**err, "limit": limit, "ok": err["flash"] <= limit and math.isfinite(err["flash"])}
        ok = ok and row[name]["ok"]
    row["ok"] = ok
    return row


def _time_ms(torch, fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def speed(torch, flash_attn_func):
    import torch.nn.functional as F

    b, s, h, d = 4, 4096, 16, 128
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)
    qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    flops = 4 * b * h * s * s * d / 2  # causal: half the score matrix
    runs = {
        "flash": (lambda: flash_attn_func(q, k, v, causal=True), q),
        "sdpa": (lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), qt),
    }
    out = {"dtype": "bfloat16", "batch": b, "seqlen": s, "heads": h, "hdim": d, "causal": True}
    for who, (fwd, leaf) in runs.items():
        with torch.no_grad():
            f_ms = _time_ms(torch, fwd)
        grad = dout if leaf is q else dout.transpose(1, 2).contiguous()
        fb_ms = _time_ms(torch, lambda fwd=fwd, grad=grad: fwd().backward(grad))
        out[who] = {
            "fwd_ms": f_ms,
            "fwd_bwd_ms": fb_ms,
            "fwd_tflops": flops / f_ms / 1e9,
            "fwd_bwd_tflops": 3.5 * flops / fb_ms / 1e9,
        }  # backward ~2.5x forward's flops
    return out


def main() -> int:
    global DEVICE, SEQLEN
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True, help="where to write the result")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    p.add_argument("--seqlen", type=int, default=SEQLEN, help=argparse.SUPPRESS)
    args = p.parse_args()
    DEVICE, SEQLEN = args.device, args.seqlen
    try:
        import torch
    except ImportError:
        print("error: this python has no torch; the check runs in the build environment", file=sys.stderr)
        return 2
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here: the check runs flash-attn's kernels on a GPU", file=sys.stderr)
        return 2
    import flash_attn
    from flash_attn import flash_attn_func

    result = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if DEVICE == "cuda" else "-",
        "torch": torch.__version__,
        "flash_attn": flash_attn.__version__,
        "module": os.path.dirname(flash_attn.__file__),
        "criterion": f"max |flash - sdpa fp32| <= {FACTOR} x max(|sdpa - sdpa fp32|, |plain - sdpa fp32|) + {ATOL}, "
        "sdpa and plain in the same dtype",
        "cases": [],
    }
    for dt, d, c in CASES:
        row = run_case(torch, flash_attn_func, dt, d, c)
        result["cases"].append(row)
        errs = " ".join(f"{n} {row[n]['flash']:.2e}/{row[n]['limit']:.2e}" for n in ("out", "dq", "dk", "dv"))
        print(f"check {dt} hdim {d} causal {c}: {'ok' if row['ok'] else 'FAIL'} ({errs})", flush=True)
    if DEVICE == "cuda":
        result["speed"] = speed(torch, flash_attn_func)
    result["ok"] = all(r["ok"] for r in result["cases"])
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.json)) or ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.json)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
