"""SpecForge 0.2.0's own trainer and exporter (``specforge train -c RUN`` then ``specforge export --to
sglang``), run in-process as its CLI runs them on one GPU, timed from its step records.

usage: python train_specforge.py LOG_JSON RUN_CONFIG DRAFT_CONFIG EXPORT_DIR

RUN_CONFIG is SpecForge's run file (YAML; specrig writes it as JSON, which YAML reads), DRAFT_CONFIG
its draft model's config. After training, the last step's checkpoint (``OUTPUT_DIR/RUN_ID-stepN``) is
exported to EXPORT_DIR (``config.json``, ``model.safetensors``: ``LlamaForCausalLMEagle3``, the
EAGLE-3 format vLLM and SGLang load).

On a CUDA device SpecForge runs as shipped. Without one (recorded in LOG_JSON): its loss
(``specforge.core.loss``, a Triton GPU kernel imported at module level) is stood in by the same
formula in plain torch, torch.compile is off (on the CPU its first step alone took 39 s), and the run
file gets :data:`CPU_SETTINGS` (written beside it as ``RUN-cpu.yaml``).

LOG_JSON gets ``seconds`` (training's wall time: model build, data, every step), ``first_step_s``,
``step_s`` (the median gap between step records after the first ten), ``steps_run``, ``train``
(every 10th step's metrics and the last, each with ``t`` seconds from the start), ``losses`` (every
step's), ``checkpoint``,
``export_s``, ``device`` and ``loss_kernel``. Imports from specrig only its sibling step_times.py.
"""

import ast
import io
import json
import re
import sys
import time
import types
from pathlib import Path

from step_times import step_summary

# without CUDA: FSDP needs an accelerator (NO_SHARD runs it as DDP, over gloo), and flex attention's
# kernels are GPU ones (sdpa is one of SpecForge's own backends); and no data-loading workers
CPU_SETTINGS = {"fsdp_sharding": "NO_SHARD", "attention_backend": "sdpa"}
STEP = re.compile(r"^step (\d+): (\{.*\})\s*$")


class LogSoftmaxLoss:
    """The value of SpecForge's ``LogSoftmaxLoss.apply(logits, target, position_mask)``: the mean over
    the B*T rows of -mask * sum over the vocabulary of target * log_softmax(logits)."""

    @staticmethod
    def apply(logits, target, position_mask):
        import torch

        b, t, _ = logits.shape
        logp = torch.log_softmax(logits.float(), dim=-1)
        rows = -(target.float() * logp).sum(-1) * position_mask.reshape(b, t).to(logp.dtype)
        return rows.mean()


def stand_in_loss() -> None:
    """Put the plain-torch loss where ``specforge.core.loss`` is imported from (CPU only)."""
    import specforge.core

    mod = types.ModuleType("specforge.core.loss")
    mod.LogSoftmaxLoss = LogSoftmaxLoss
    sys.modules["specforge.core.loss"] = mod
    specforge.core.loss = mod


class StepRecords(io.TextIOBase):
    """stdout with SpecForge's ``step N: {...}`` records (one a step) kept with their times, and shown
    as ``progress N TOTAL`` lines plus a short one at every tenth of the run; the rest passes through."""

    def __init__(self, out, t0: float, total: int) -> None:
        self.out, self.t0, self.total, self.buf = out, t0, total, ""
        self.steps: list[tuple[int, float, dict]] = []

    def write(self, s: str) -> int:
        self.buf += s
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            m = STEP.match(line)
            if not m:
                self.out.write(line + "\n")
                continue
            n, metrics = int(m.group(1)), ast.literal_eval(m.group(2))
            metrics = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
            self.steps.append((n, time.monotonic() - self.t0, metrics))
            self.out.write(f"progress {n} {self.total}\n")
            if n == 1 or n == self.total or n % max(1, self.total // 10) == 0:
                self.out.write(f"step {n}: loss {metrics.get('loss', 0):.3f}, acc {metrics.get('acc', 0):.3f}\n")
        return len(s)

    def flush(self) -> None:
        self.out.flush()

    def summary(self) -> dict:
        return step_summary(self.steps) | {"losses": [round(m["loss"], 4) for _, _, m in self.steps if "loss" in m]}


def specforge(*argv: str) -> None:
    from specforge.cli import main

    rc = main(list(argv))
    if rc:
        raise SystemExit(f"specforge {argv[0]} exited {rc}")


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    log, run, draft, export = (Path(a) for a in sys.argv[1:])
    import torch

    cuda = torch.cuda.is_available()
    cfg = json.loads(run.read_text())
    if not cuda:
        stand_in_loss()
        torch._dynamo.config.disable = True
        cfg["training"] |= CPU_SETTINGS
        cfg["data"]["dataloader_num_workers"] = 0  # the loading in the training process: two cores here
        run = run.with_name(f"{run.stem}-cpu.yaml")
        run.write_text(json.dumps(cfg, indent=2))
    out_dir = Path(cfg["output_dir"])
    t0 = time.monotonic()
    records = StepRecords(sys.stdout, t0, int(cfg["training"]["max_steps"]))
    sys.stdout = records
    try:
        specforge("train", "-c", str(run))
    finally:
        sys.stdout = records.out
        sys.stdout.write(records.buf)  # a last line without its newline
    seconds = time.monotonic() - t0
    ckpts = sorted(out_dir.glob("*-step*"), key=lambda d: int(d.name.rsplit("-step", 1)[1]))
    if not ckpts:
        print(f"SpecForge saved no checkpoint in {out_dir}", file=sys.stderr)
        return 1
    t1 = time.monotonic()
    specforge(
        "export",
        "--to",
        "sglang",
        "--checkpoint",
        str(ckpts[-1]),
        "--draft-config",
        str(draft),
        "--output-dir",
        str(export),
    )
    specforge_export = time.monotonic() - t1
    summary = records.summary() | {
        "seconds": seconds,
        "checkpoint": str(ckpts[-1]),
        "export_s": specforge_export,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "loss_kernel": "SpecForge's Triton kernel" if cuda else "plain-torch stand-in (no CUDA)",
        "cpu_settings": None if cuda else CPU_SETTINGS | {"dataloader_num_workers": 0},
    }
    log.write_text(json.dumps(summary))
    rate = f", {summary['step_s'] * 1e3:.0f} ms a step" if summary["step_s"] else ""
    print(f"SpecForge ran for {seconds:.0f} s: {summary['steps_run']} steps{rate}; exported {export}", flush=True)
    return 0 if (export / "model.safetensors").is_file() else 1


if __name__ == "__main__":
    sys.exit(main())
