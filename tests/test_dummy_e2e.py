"""A dummy-weight target on a real vLLM server on the CPU (the path the GPU recipes' big shapes take:
an 8B Llama, Kimi-K2.5's layers), with a random EAGLE-3 head.

vLLM applies the target's ``--load-format dummy`` to the drafter too: the head's checkpoint is then
never read, and the drafter borrows the target's output head (for the Kimi shape's random head:
163,840 logits a draft token, "Detected EAGLE model without its own lm_head"). specrig passes
``draft_load_config = {"load_format": "auto"}`` for a drafter folder
that is not the target itself; this checks, on a real server, that the head's own weights load.
One server start (about 1-2 minutes on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.lab.results import load_summary

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_a_dummy_target_serves_a_random_eagle3_head_with_its_own_weights(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specrig.cli",
            "bench",
            "--recipe",
            "cpu",
            "--model",
            "smollm2-dummy",
            "--spec",
            "eagle3-random",
            "--k",
            "2",
            "--no-baseline",
            "--max-tokens",
            "16",
            "--num-prompts",
            "2",
            "--results",
            str(run),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = load_summary(run)
    assert "DUMMY WEIGHTS" in s.model and "30 layers" in s.model
    (cfg,) = s.configs
    spec = json.loads(cfg.server_argv[cfg.server_argv.index("--speculative-config") + 1])
    assert spec["draft_load_config"] == {"load_format": "auto"}
    assert cfg.server_argv[cfg.server_argv.index("--load-format") + 1] == "dummy"
    log = (run / "logs" / f"server-{cfg.name}-r0.log").read_text()
    assert "distinct lm_head weights" in log and "without its own lm_head" not in log
    (m,) = s.measurements
    assert m.completion_tokens == 32 and m.spec_counters is not None and m.spec_counters.draft_tokens > 0
