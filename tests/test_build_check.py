"""A build's check script, run where it is built: flash-attn's (build/flash-attn.toml's
``[check]``, ``inenv/flash_attn_sdpa.py``) here on the CPU against a stand-in flash_attn (torch's
SDPA under flash-attn's name): a correct one passes, one with the causal mask flipped fails; with no
GPU it refuses by name. (The check that ran on an H200, replayed: studies/2026-12-03-flash-attn-h200.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.builder.definition import CHECKS_DIR


@pytest.fixture(scope="module")
def torch_python() -> Path:
    """A CPU python with torch: the cpu recipe's vLLM environment (made once for the engine tests)."""
    from specrig.env.make import make_env
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    return Path(make_env(recipe, recipe.engine["vllm"].env).python)


STANDIN = """
import os
import torch.nn.functional as F
__version__ = "0.0.0+standin"
def flash_attn_func(q, k, v, causal=False):
    causal = (not causal) if os.environ.get("STANDIN_FLIP_CAUSAL") else causal
    out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal)
    return out.transpose(1, 2)
"""


@pytest.mark.engine
@pytest.mark.parametrize("broken", [False, True])
def test_the_checker_passes_a_correct_attention_and_fails_a_wrong_one(
    torch_python: Path, tmp_path: Path, broken: bool
) -> None:
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text(STANDIN)
    env = {k: v for k, v in os.environ.items() if k != "STANDIN_FLIP_CAUSAL"} | {"PYTHONPATH": str(tmp_path)}
    if broken:
        env["STANDIN_FLIP_CAUSAL"] = "1"
    out = tmp_path / "result.json"
    cmd = [str(torch_python), str(CHECKS_DIR / "flash_attn_sdpa.py"), "--json", str(out), "--device", "cpu"]
    proc = subprocess.run([*cmd, "--seqlen", "65"], env=env, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    assert result["module"].startswith(str(tmp_path))
    assert proc.returncode == (1 if broken else 0), proc.stdout + proc.stderr
    assert result["ok"] is not broken
    assert all(c["ok"] is not broken for c in result["cases"]), proc.stdout


def test_the_checker_refuses_without_a_gpu_by_name(tmp_path: Path) -> None:
    """Run without torch (this interpreter may have none) or without CUDA: exit 2 and a sentence, no traceback."""
    proc = subprocess.run(
        [sys.executable, str(CHECKS_DIR / "flash_attn_sdpa.py"), "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert "torch" in proc.stderr or "CUDA" in proc.stderr
    assert not (tmp_path / "r.json").exists()
