"""Time sglang-kernel's ops on this GPU, and keep their outputs, for one installed wheel.

Two wheels of one version (the repacked published one, specrig's own build) cannot be told apart
by serving SmolLM2: the host's Python schedules every step, and two starts of one server land
20-30% apart (docs/sglang.md). Their kernels can: each op on fixed shapes, timed on the GPU
alone (CUDA graphs, triton.testing.do_bench_cudagraph), outputs from seeded inputs kept to
compare bit for bit (a sha256 of each output in the JSON; --keep-outputs also saves the tensors,
for the largest difference where they differ). Run once per wheel, interleaved, each on PYTHONPATH:

    PYTHONPATH=WHEEL_A_DIR python3 sgl-kernel-ops.py --label repacked-1 --out DIR
    PYTHONPATH=WHEEL_B_DIR python3 sgl-kernel-ops.py --label built-1 --out DIR
    python3 sgl-kernel-ops.py --compare DIR repacked built      # the table, from DIR/*.json

Shapes: SmolLM2-135M (hidden 576, MLP 1536) and a Llama-3-8B layer (4096, 14336); FP8 and INT8
GEMMs at decode (16 rows) and prefill (2048 rows); MoE routing for 64 experts, top-6;
greedy tree verification for 8 requests at k=2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from pathlib import Path


def cases(torch, sk):
    """(name, shape, fn): fn() runs the op once on tensors made here, returns what it wrote."""
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=bf):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(dtype)

    out = []
    for tokens, hidden, inter in ((8, 576, 1536), (2048, 576, 1536), (8, 4096, 14336), (2048, 4096, 14336)):
        x, w, y = rnd(tokens, hidden), rnd(hidden), torch.empty(tokens, hidden, device=dev, dtype=bf)
        out.append(("rmsnorm", f"{tokens}x{hidden}", lambda x=x, w=w, y=y: sk.rmsnorm(x, w, out=y)))
        r0, h0 = rnd(tokens, hidden), rnd(tokens, hidden)

        def fused(x0=h0, r0=r0, w=w):
            x1, r1 = x0.clone(), r0.clone()
            sk.fused_add_rmsnorm(x1, r1, w)
            return torch.stack([x1, r1])

        out.append(("fused_add_rmsnorm", f"{tokens}x{hidden}", fused))
        a, o = rnd(tokens, 2 * inter), torch.empty(tokens, inter, device=dev, dtype=bf)
        out.append(("silu_and_mul", f"{tokens}x{2 * inter}", lambda a=a, o=o: sk.silu_and_mul(a, o)))
    f8 = torch.float8_e4m3fn
    for m, n, k in ((16, 4096, 4096), (2048, 4096, 4096), (16, 28672, 4096), (2048, 28672, 4096)):
        a = (rnd(m, k, dtype=torch.float32) * 64).clamp(-448, 448).to(f8)
        b = (rnd(n, k, dtype=torch.float32) * 64).clamp(-448, 448).to(f8).t()
        sa, sb = rnd(m, dtype=torch.float32).abs() * 1e-3, rnd(n, dtype=torch.float32).abs() * 1e-3
        out.append(("fp8_scaled_mm", f"{m}x{n}x{k}", lambda a=a, b=b, sa=sa, sb=sb: sk.fp8_scaled_mm(a, b, sa, sb, bf)))
        ai = (rnd(m, k, dtype=torch.float32) * 20).clamp(-127, 127).to(torch.int8)
        bi = (rnd(n, k, dtype=torch.float32) * 20).clamp(-127, 127).to(torch.int8).t()
        out.append(
            ("int8_scaled_mm", f"{m}x{n}x{k}", lambda a=ai, b=bi, sa=sa, sb=sb: sk.int8_scaled_mm(a, b, sa, sb, bf))
        )
    for m in (16, 2048):  # the inputs drawn in the order of the run captured on the H200
        x = rnd(m, 4096)
        q, s = torch.empty(m, 4096, device=dev, dtype=f8), torch.empty(m, 32, device=dev, dtype=torch.float32)

        def quant(x=x, q=q, s=s):
            sk.sgl_per_token_group_quant_8bit(x, q, s, 128, 1e-10, -448.0, 448.0)
            return torch.cat([q.view(torch.uint8).float().flatten(), s.flatten()])

        out.append(("per_token_group_quant_fp8", f"{m}x4096/128", quant))
    for m in (16, 2048):
        logits = rnd(m, 64, dtype=torch.float32)
        tw, ti = torch.empty(m, 6, device=dev), torch.empty(m, 6, device=dev, dtype=torch.int32)

        def route(lg=logits, tw=tw, ti=ti):
            sk.topk_softmax(tw, ti, lg)
            return torch.cat([tw.flatten(), ti.float().flatten()])

        out.append(("topk_softmax", f"{m}x64/6", route))
    bs, nd = 8, 3  # k=2: a chain of 3 tokens per request
    vocab = 49152
    cand = torch.randint(0, vocab, (bs, nd), generator=g, device=dev)
    tgt = torch.where(
        torch.rand(bs, nd, generator=g, device=dev) < 0.6,
        cand.roll(-1, 1),
        torch.randint(0, vocab, (bs, nd), generator=g, device=dev),
    )
    ridx = torch.arange(bs * nd, device=dev).view(bs, nd)
    nxt = torch.tensor([[1, 2, -1]] * bs, device=dev)
    sib = torch.full((bs, nd), -1, device=dev, dtype=torch.int64)

    def verify():
        pred = torch.full((bs * nd,), -1, dtype=torch.int32, device=dev)
        acc = torch.full((bs, nd), -1, dtype=torch.int32, device=dev)
        num = torch.zeros(bs, dtype=torch.int32, device=dev)
        sk.verify_tree_greedy(pred, acc, num, cand, ridx, nxt, sib, tgt)
        return torch.cat([pred, acc.flatten(), num]).float()

    out.append(("verify_tree_greedy", f"{bs}x{nd}", verify))
    return out


def run(args) -> int:
    import importlib.metadata as md

    import sgl_kernel as sk
    import torch
    from triton.testing import do_bench_cudagraph

    torch.backends.cuda.matmul.allow_tf32 = False
    res = {
        "label": args.label,
        "sglang_kernel": md.version("sglang-kernel"),
        "sgl_kernel_file": os.path.relpath(sk.__file__, os.path.dirname(os.path.dirname(sk.__file__))),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "ops": [],
    }
    outputs = {}
    for name, shape, fn in cases(torch, sk):
        try:
            y = fn()
            torch.cuda.synchronize()
            y = y.detach().float().cpu().contiguous()
            outputs[f"{name} {shape}"] = y
            us = [1000 * do_bench_cudagraph(fn, rep=args.rep_ms, return_mode="median") for _ in range(3)]
        except Exception as e:  # one op's failure is a result, not the end of the run
            res["ops"].append({"op": name, "shape": shape, "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"{args.label:>12} {name:>26} {shape:>16}  failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        digest = hashlib.sha256(y.numpy().tobytes()).hexdigest()
        res["ops"].append({"op": name, "shape": shape, "us": statistics.median(us), "us_runs": us, "sha256": digest})
        print(f"{args.label:>12} {name:>26} {shape:>16} {statistics.median(us):9.2f} us", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.keep_outputs:
        torch.save(outputs, args.out / f"{args.label}.outputs.pt")
    tmp = args.out / f".{args.label}.json.tmp"
    tmp.write_text(json.dumps(res, indent=1))
    tmp.replace(args.out / f"{args.label}.json")
    return 0


def compare(folder: Path, a: str, b: str) -> int:
    """Median over a wheel's repeats (files LABEL-N.json) of each op's GPU time; outputs bit for bit."""

    def load(label):
        runs = sorted(folder.glob(f"{label}-*.json"))
        if not runs:
            sys.exit(f"no {label}-N.json in {folder}: run the op timing for that wheel first")
        data = [json.loads(p.read_text()) for p in runs]
        times, digests = {}, {}
        for d in data:
            for o in (o for o in d["ops"] if "us" in o):
                times.setdefault((o["op"], o["shape"]), []).append(o["us"])
                digests.setdefault((o["op"], o["shape"]), set()).add(o.get("sha256"))
        return data[0], times, digests, folder / f"{runs[0].stem}.outputs.pt"

    (ia, ta, da, ka), (ib, tb, db, kb) = load(a), load(b)
    print(
        f"A = {a}: sglang-kernel {ia['sglang_kernel']} ({ia['sgl_kernel_file']}); B = {b}: {ib['sglang_kernel']}; {ia['gpu']}"
    )
    print(f"{'op':>26} {'shape':>16} {'A us':>9} {'B us':>9} {'B/A':>6}  outputs")
    ratios = []
    for key, us_a in ta.items():
        us_b = tb.get(key)
        if us_b is None:
            continue
        ma, mb = statistics.median(us_a), statistics.median(us_b)
        ratios.append(mb / ma)
        if None in da[key] | db[key]:
            same = "not kept"
        elif len(da[key]) > 1 or len(db[key]) > 1:
            same = "differ from run to run"
        elif da[key] == db[key]:
            same = "identical"
        elif ka.exists() and kb.exists():
            import torch

            ya, yb = torch.load(ka)[" ".join(key)], torch.load(kb)[" ".join(key)]
            same = f"max |A-B| {float((ya - yb).abs().nan_to_num().max()):.3g}"
        else:
            same = "differ"
        print(f"{key[0]:>26} {key[1]:>16} {ma:9.2f} {mb:9.2f} {mb / ma:6.3f}  {same}")
    print(
        f"geometric mean B/A over {len(ratios)} op shapes: {statistics.geometric_mean(ratios):.3f} (runs per wheel: A {len(next(iter(ta.values())))}, B {len(next(iter(tb.values())))})"
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label")
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--rep-ms", type=int, default=40, help="time each op this long, three times (default 40)")
    p.add_argument("--keep-outputs", action="store_true", help="also save the output tensors (LABEL.outputs.pt)")
    p.add_argument("--compare", nargs=3, metavar=("DIR", "A", "B"))
    args = p.parse_args()
    if args.compare:
        return compare(Path(args.compare[0]), args.compare[1], args.compare[2])
    if not args.label:
        p.error("--label NAME is needed to time a wheel (or --compare DIR A B)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
