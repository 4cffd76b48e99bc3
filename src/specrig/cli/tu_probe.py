"""``specrig tu-probe``: compile one flash-attn translation unit with the flags a
real build uses and measure its time and peak memory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "measure one flash-attn nvcc unit's time and peak memory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="a python with torch (its headers and extension flags)",
    )
    p.add_argument(
        "--torch-wheel", type=Path, help="take torch's headers and flags from this wheel instead (no import)"
    )
    p.add_argument(
        "--unit", default="flash_fwd_hdim128_fp16_sm80.cu", help="translation unit under csrc/flash_attn/src"
    )
    p.add_argument("--arch", default="120")
    p.add_argument("--nvcc-threads", type=int, default=1)
    p.add_argument("--source-cache", type=Path, default=None)
    p.add_argument("--json", type=Path, help="also write the result here")


def run(args: argparse.Namespace) -> int:
    from specrig.builder.tu_probe import probe_unit

    return probe_unit(
        python=args.python,
        torch_wheel=args.torch_wheel,
        unit=args.unit,
        arch=args.arch,
        nvcc_threads=args.nvcc_threads,
        source_cache=args.source_cache,
        json_out=args.json,
    )
