"""Train a one-layer EAGLE-3 drafter on the target's hidden states and write it
in the layout vLLM's Eagle3LlamaForCausalLM loads.

usage: python train_eagle3.py TARGET_DIR HIDDEN_DIR OUT_DIR SETTINGS_JSON

SETTINGS_JSON: {"epochs", "lr", "ttt_steps", "draft_vocab", "max_len", "batch_tokens", "seed",
"max_seconds", "threads", "step_decay", "limit", "loss_on", "norms", "optimizer", "weight_decay",
"length_bucket"} (the last four optional: eagle3, adamw, 0, 1; the batches: train_batches.py).
``limit`` (optional): train on the first N training samples only (the data-size curve; the samples
are in the prompts' shuffled order, so the first N are a random subset and the sizes nest).

Runs on CUDA when torch sees a GPU (bf16 autocast), else on the CPU (fp32). Features: from the
hidden-state shards when they hold them (``aux``/``last``, the CPU default), else computed on the
device for every batch by the target itself (:class:`TargetFeatures`, ``hidden_states.py --features
online``): a GPU recomputes them faster than it could read them back from disk.
Loss: soft cross-entropy against the target's own next-token distribution (its final norm and
lm_head applied to the stored pre-norm last hidden state, restricted to the draft vocabulary) at
every draft step of the TTT unroll, step j weighted step_decay**j, at every position (``loss_on`` all) or only where the
drafted token is the target's answer (answer). OUT_DIR gets model.safetensors (bf16,
with d2t / t2d), train_log.json and, between epochs, ckpt.pt (resume).
Progress lines: ``progress DONE TOTAL``, TOTAL the steps the run will take (train_progress.py).
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from eagle3_model import (
    NORMS,
    Eagle3Draft,
    TargetFeatures,
    load_split,
    pick_device,
    target_config,
    target_head,
    teacher_forced_acceptance,
)
from torch import nn
from train_batches import batches, collate
from train_optim import Optimizers, build
from train_progress import progress_line


def response_counts(samples: list[dict], vocab: int) -> torch.Tensor:
    """How often the target chose each token: its greedy labels where stored, else
    the response tokens (the target's own greedy answers: the same choices)."""
    counts = torch.zeros(vocab, dtype=torch.int64)
    for s in samples:
        picks = s["labels"] if "labels" in s else s["ids"][s["prompt_len"] :]
        counts += torch.bincount(picks, minlength=vocab)
    return counts


@dataclass
class Data:
    """The training and held-out samples, the target's embedding, final norm and lm_head,
    and (features computed online) the target that computes the features."""

    train: list[dict]
    held: list[dict]
    embed_w: torch.Tensor
    norm_w: torch.Tensor
    head_w: torch.Tensor
    feats: TargetFeatures | None
    n_aux: int


@dataclass
class Drafter:
    """The drafter being trained, its draft vocabulary and the teacher it learns from."""

    model: Eagle3Draft
    cfg: dict
    draft_ids: torch.Tensor
    coverage: float
    embed: nn.Embedding
    t_norm_w: torch.Tensor
    t_head: torch.Tensor  # the target's lm_head over the draft vocabulary


@dataclass
class Schedule:
    """The batches of every epoch and the learning rate along them."""

    plan: list[list[list[dict]]]
    total_steps: int
    warm: int
    max_seconds: float

    def lr_factor(self, step: int, elapsed: float) -> float:
        """Warm-up over the first 5%, then cosine to 10%; progress is steps or time, whichever is
        further along, so a run that max_seconds stops long before its planned steps (a slow host)
        neither spends its budget warming up nor ends at a high rate."""
        warm = (step + 1) / self.warm
        if self.max_seconds:
            warm = max(warm, elapsed / (0.05 * self.max_seconds))
        if warm < 1:
            return warm
        prog = max(step - self.warm, 0) / max(1, self.total_steps - self.warm)
        if self.max_seconds:
            prog = max(prog, elapsed / self.max_seconds)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0)))


@dataclass
class Loop:
    """What every training step reads: the settings, the device, the unroll depth and the
    weight of each draft step, the sample length cap, the norm's epsilon, the autocast."""

    st: dict
    dev: torch.device
    k: int
    max_len: int
    weights: torch.Tensor
    eps: float
    autocast: torch.autocast


def load_data(target: Path, hidden: Path, st: dict, dev: torch.device) -> Data:
    train, held = load_split(hidden / "train"), load_split(hidden / "heldout")
    if st.get("limit"):
        train = train[: int(st["limit"])]
    embed_w, norm_w, head_w = target_head(target)
    online = bool(train) and "aux" not in train[0]
    feats = None
    if online:  # features computed on the device, batch by batch, by the target itself
        aux_ids = json.loads((hidden / "stats.json").read_text())["aux_ids"]
        feats = TargetFeatures(target, aux_ids, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32)
        for s in held:  # the held-out features once (and the target's labels)
            a, _, lab = feats(s["ids"][None], labels=True)
            s["aux"], s["labels"] = a[0].to(torch.bfloat16), lab[0]
        n_aux = len(aux_ids)
    else:
        n_aux = train[0]["aux"].shape[1]
    return Data(train, held, embed_w, norm_w, head_w, feats, n_aux)


def build_drafter(data: Data, tcfg: dict, st: dict, dev: torch.device) -> Drafter:
    # draft vocabulary: the target's most frequent greedy choices in the training data
    counts = response_counts(data.train, tcfg["vocab_size"])
    v = min(int(st["draft_vocab"]), tcfg["vocab_size"])
    draft_ids = counts.topk(v).indices.sort().values
    coverage = counts[draft_ids].sum().item() / max(counts.sum().item(), 1)
    n_aux = data.n_aux
    cfg = tcfg | {"num_aux": n_aux, "draft_vocab_size": v} | NORMS[st.get("norms", "eagle3")]
    model = Eagle3Draft(cfg)
    with torch.no_grad():  # start from the target's own output head and norm
        model.lm_head.weight.copy_(data.head_w[draft_ids])
        model.norm.weight.copy_(data.norm_w)
        # start as the "logit lens" of the deepest aux feature: fc passes it through,
        # the residual branches add nothing yet (zero output projections)
        h = tcfg["hidden_size"]
        model.fc.weight.mul_(0.1)
        model.fc.weight[:, (n_aux - 1) * h :] += torch.eye(h)
        model.o_proj.weight.zero_()
        model.down_proj.weight.zero_()
    model.to(dev)
    embed = nn.Embedding.from_pretrained(data.embed_w, freeze=True).to(dev)
    t_norm_w, t_head = data.norm_w.to(dev), data.head_w[draft_ids].to(dev)  # teacher over the draft vocabulary
    return Drafter(model, cfg, draft_ids, coverage, embed, t_norm_w, t_head)


def make_schedule(train: list[dict], st: dict, max_len: int, rng: random.Random) -> Schedule:
    epochs = int(st["epochs"])
    bucket = int(st.get("length_bucket", 1))
    plan = [batches(train, int(st["batch_tokens"]), max_len, rng, bucket) for _ in range(epochs)]
    total_steps = sum(len(p) for p in plan)
    warm = max(1, total_steps // 20)
    max_seconds = float(st.get("max_seconds") or 0)
    return Schedule(plan, total_steps, warm, max_seconds)


def new_log(data: Data, drafter: Drafter, dev: torch.device) -> dict:
    return {
        "epochs": [],
        "draft_vocab": drafter.cfg["draft_vocab_size"],
        "draft_vocab_coverage": drafter.coverage,
        "train_samples": len(data.train),
        "device": str(dev),
        "features": "online" if data.feats is not None else "stored",
        "train_tokens": sum(len(s["ids"]) for s in data.train),
        "heldout_samples": len(data.held),
        "stopped_early": False,
    }


def resume(ckpt: Path, model: Eagle3Draft, opt: Optimizers, dev: torch.device, log: dict) -> tuple[int, int, dict]:
    """The epoch to start at, the step and the log: after the checkpoint's epoch when there is one."""
    start_epoch, step = 0, 0
    if ckpt.exists():
        state = torch.load(
            ckpt, weights_only=True, map_location=dev
        )  # tensors and plain data only: no pickled code runs
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch, step, log = state["epoch"], state["step"], state["log"]
        print(f"resuming after epoch {start_epoch}", flush=True)
    return start_epoch, step, log


def loss_positions(lens: torch.Tensor, plens: torch.Tensor, n: int, j: int, on: str) -> torch.Tensor:
    """[B, n]: the base positions i whose draft step j counts in the loss. Its label, the target's
    distribution at p = i+1+j (of the token at p+1, which the step drafts), must lie inside the
    sample; with ``on`` answer (speculators' and EAGLE's own loss mask) the drafted token must also
    be the target's answer, not the prompt."""
    p = torch.arange(n, device=lens.device)[None] + 1 + j
    valid = p < lens[:, None]
    return valid & (p + 1 >= plens[:, None]) if on == "answer" else valid


def batch_loss(drafter: Drafter, feats: TargetFeatures | None, d: dict[str, torch.Tensor], lp: Loop) -> torch.Tensor:
    """Soft cross-entropy against the target's next-token distribution at every draft step of
    the unroll, step j weighted ``weights[j]``."""
    k, dev, weights = lp.k, lp.dev, lp.weights
    with torch.no_grad():
        if feats is not None:
            a, x, _ = feats(d["ids"], d["pad"])
            d["aux"] = a.reshape(*a.shape[:2], -1)
        else:
            x = d["last"]
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + lp.eps) * drafter.t_norm_w
        teacher = (x @ drafter.t_head.T).softmax(-1)  # [B, T, V]: the target's next-token distribution at p
    t = d["ids"].shape[1]
    loss = torch.zeros((), device=dev)
    with lp.autocast:
        logits = drafter.model.unroll(d["aux"], d["ids"], drafter.embed, k, d["pad"])
    for j in range(k):
        n = t - 1 - j  # base positions i whose label position p = i+1+j lies inside the batch
        if n <= 0:
            continue
        valid = loss_positions(d["lens"], d["plens"], n, j, lp.st.get("loss_on", "all"))
        if not valid.any():
            continue
        ce = -(teacher[:, 1 + j :] * logits[j][:, :n].float().log_softmax(-1)).sum(-1)
        loss = loss + weights[j] * ce[valid].mean()
    return loss / weights.sum()


def run_epoch(
    drafter: Drafter,
    feats: TargetFeatures | None,
    plan: list[list[dict]],
    sched: Schedule,
    opt: Optimizers,
    lp: Loop,
    step: int,
    t0: float,
    log: dict,
) -> tuple[float, int, int]:
    """One epoch's steps (until max_seconds, then ``stopped_early``): the summed loss, the
    number of steps it sums and the step reached."""
    st, model = lp.st, drafter.model
    bucket = int(st.get("length_bucket", 1))
    loss_sum, n_sum = 0.0, 0
    for batch in plan:
        d = {name: x.to(lp.dev, non_blocking=True) for name, x in collate(batch, lp.max_len, bucket).items()}
        loss = batch_loss(drafter, feats, d, lp)
        opt.set_lr(sched.lr_factor(step, time.monotonic() - t0))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_sum, n_sum = loss_sum + loss.item(), n_sum + 1
        elapsed, budget = time.monotonic() - t0, float(st.get("max_seconds") or 0)
        stop = bool(budget) and elapsed > budget
        print(progress_line(step, sched.total_steps, elapsed, budget, loss.item(), stopped=stop), flush=True)
        if stop:
            log["stopped_early"] = True
            break
    return loss_sum, n_sum, step


def log_epoch(log: dict, epoch: int, loss_sum: float, n_sum: int, te: float, ev: dict) -> None:
    log["epochs"].append(
        {
            "epoch": epoch + 1,
            "loss": loss_sum / max(n_sum, 1),
            "steps": n_sum,
            "seconds": time.monotonic() - te,
            "heldout_per_position": ev.get("per_position"),
            "heldout_acceptance_rate": ev.get("acceptance_rate"),
        }
    )
    print(
        f"epoch {epoch + 1}: loss {loss_sum / max(n_sum, 1):.3f}, held-out per position "
        f"{[round(x, 3) for x in ev.get('per_position', [])]}",
        flush=True,
    )


def save_checkpoint(out: Path, model: Eagle3Draft, opt: Optimizers, epoch: int, step: int, log: dict) -> None:
    tmp = out / "ckpt.pt.tmp"
    torch.save(
        {
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "epoch": epoch + 1,
            "step": step,
            "log": log,
        },
        tmp,
    )
    tmp.replace(out / "ckpt.pt")


def train(
    drafter: Drafter,
    data: Data,
    sched: Schedule,
    opt: Optimizers,
    lp: Loop,
    out: Path,
    log: dict,
    start_epoch: int,
    step: int,
) -> tuple[tuple[float, int, dict] | None, int, float]:
    """The epochs from ``start_epoch``, each evaluated on the held-out samples and checkpointed:
    the best epoch (held-out acceptance rate, epoch, weights), the steps taken and the start time."""
    model = drafter.model
    best: tuple[float, int, dict] | None = None
    t0 = time.monotonic() - sum(e["seconds"] for e in log["epochs"])
    log["epoch_steps"] = len(sched.plan[0]) if sched.plan else 0  # every epoch packs the same batches
    for epoch in range(start_epoch, len(sched.plan)):
        model.train()
        te = time.monotonic()
        loss_sum, n_sum, step = run_epoch(drafter, data.feats, sched.plan[epoch], sched, opt, lp, step, t0, log)
        ev = (
            teacher_forced_acceptance(model, data.held, drafter.embed, drafter.draft_ids, lp.k, lp.max_len)
            if data.held
            else {}
        )
        log_epoch(log, epoch, loss_sum, n_sum, te, ev)
        rate = ev.get("acceptance_rate", 0.0)
        if best is None or rate > best[0]:  # keep the epoch that drafts best on held-out data
            best = (rate, epoch + 1, {k_: v.detach().cpu().clone() for k_, v in model.state_dict().items()})
        if log["stopped_early"]:
            break
        save_checkpoint(out, model, opt, epoch, step, log)
    return best, step, t0


def save_drafter(
    drafter: Drafter,
    best: tuple[float, int, dict] | None,
    tcfg: dict,
    out: Path,
    log: dict,
    step: int,
    t0: float,
) -> None:
    """model.safetensors (the best epoch's weights, with d2t / t2d) and train_log.json; the
    checkpoint goes."""
    from safetensors.torch import save_file

    model, draft_ids = drafter.model, drafter.draft_ids
    v = drafter.cfg["draft_vocab_size"]
    if best is not None:
        model.load_state_dict(best[2])
        log["best_epoch"] = best[1]
    model.cpu()
    tensors = model.export_state()
    tensors["d2t"] = (draft_ids - torch.arange(v)).to(torch.int64)
    t2d = torch.zeros(tcfg["vocab_size"], dtype=torch.bool)
    t2d[draft_ids] = True
    tensors["t2d"] = t2d
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    log["seconds"] = time.monotonic() - t0
    log["steps"] = step
    log["config"] = drafter.cfg
    (out / "train_log.json").write_text(json.dumps(log, indent=2))
    (out / "ckpt.pt").unlink(missing_ok=True)
    print(
        f"trained {step} steps in {log['seconds']:.0f} s; draft vocab {v} covers {drafter.coverage:.1%} of target choices",
        flush=True,
    )


def main() -> int:
    target, hidden, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    st = json.loads(Path(sys.argv[4]).read_text())
    if st.get("threads"):
        torch.set_num_threads(int(st["threads"]))
    torch.manual_seed(st["seed"])
    rng = random.Random(st["seed"])
    dev = pick_device()
    tcfg = target_config(target)
    data = load_data(target, hidden, st, dev)
    online = data.feats is not None
    print(
        f"training on {dev} ({'features computed online by the target' if online else 'stored features'})", flush=True
    )
    drafter = build_drafter(data, tcfg, st, dev)
    k, max_len = int(st["ttt_steps"]), int(st["max_len"])
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
    sched = make_schedule(data.train, st, max_len, rng)
    opt = build(drafter.model, st.get("optimizer", "adamw"), float(st["lr"]), float(st.get("weight_decay", 0.0)))
    log = new_log(data, drafter, dev)
    start_epoch, step, log = resume(out / "ckpt.pt", drafter.model, opt, dev, log)
    weights = torch.tensor([float(st["step_decay"]) ** j for j in range(k)], device=dev)
    lp = Loop(st, dev, k, max_len, weights, tcfg["rms_norm_eps"], autocast)
    best, step, t0 = train(drafter, data, sched, opt, lp, out, log, start_epoch, step)
    save_drafter(drafter, best, tcfg, out, log, step, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
