"""The trainer's batches: an epoch's packing by length and a batch's padded tensors.

``length_bucket`` (``specrig drafter --length-bucket``) rounds every batch's length up to a
multiple of it, so an epoch holds a few batch shapes instead of one for nearly every batch: on
the H200 (2026-12-05) a step of a shape not seen before cost 115-145 ms against 74 ms for a
repeated one (studies/2026-12-05-data-curve/capture-h200-curve)."""

from __future__ import annotations

import random

import torch


def padded_len(n: int, bucket: int) -> int:
    """``n`` rounded up to a multiple of ``bucket`` (1: ``n`` itself)."""
    return -(-n // bucket) * bucket


def batches(
    samples: list[dict], batch_tokens: int, max_len: int, rng: random.Random, bucket: int = 1
) -> list[list[dict]]:
    """An epoch's batches: samples sorted by length (cut to ``max_len``), packed while a batch's
    rows padded to its longest (rounded up to a multiple of ``bucket``) stay within
    ``batch_tokens``, in the seed's order."""
    order = sorted(samples, key=lambda s: min(len(s["ids"]), max_len))
    out, cur, cur_len = [], [], 0
    for s in order:
        n = padded_len(min(len(s["ids"]), max_len), bucket)
        if cur and (len(cur) + 1) * max(cur_len, n) > batch_tokens:
            out.append(cur)
            cur, cur_len = [], 0
        cur.append(s)
        cur_len = max(cur_len, n)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def collate(batch: list[dict], max_len: int, bucket: int = 1) -> dict[str, torch.Tensor]:
    """A batch as right-padded tensors, ``T`` its longest sample rounded up to a multiple of
    ``bucket``: the padding is masked (``pad``, ``lens``), so only the tensors' shape changes."""
    t = padded_len(max(min(len(s["ids"]), max_len) for s in batch), bucket)
    b = len(batch)
    ids = torch.zeros(b, t, dtype=torch.int64)
    lens = torch.zeros(b, dtype=torch.int64)
    plens = torch.tensor([min(s.get("prompt_len", 0), max_len) for s in batch], dtype=torch.int64)
    stored = "aux" in batch[0]
    if stored:
        n_aux, h = batch[0]["aux"].shape[1:]
        aux = torch.zeros(b, t, n_aux, h)
        last = torch.zeros(b, t, h)
    for r, s in enumerate(batch):
        n = min(len(s["ids"]), max_len)
        ids[r, :n] = s["ids"][:n]
        if stored:
            aux[r, :n], last[r, :n] = s["aux"][:n].float(), s["last"][:n].float()
        lens[r] = n
    pad = torch.arange(t)[None] < lens[:, None]
    d = {"ids": ids, "lens": lens, "pad": pad, "plens": plens}
    if stored:
        d |= {"aux": aux.reshape(b, t, n_aux * h), "last": last}
    return d
