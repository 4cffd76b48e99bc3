"""docs/gpu/drafter-lease.sh's job, the order of its steps: the script run by bash as a lease runs
it, with the installed `specrig` replaced by a recorder (a GPU job cannot run here; what this
checks is the script's own logic: which command runs when, with which flags)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "gpu" / "drafter-lease.sh"


def _job(tmp_path: Path, **env: str) -> tuple[list[str], str]:
    rig = tmp_path / "RIG"
    rig.mkdir()
    recorder = rig / "specrig"
    recorder.write_text('#!/bin/bash\necho "$*" >> "$HOME/calls.log"\n')
    recorder.chmod(0o755)
    (tmp_path / "job").mkdir()
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "CURVE",
            "DRAFTERS",
            "VARIANTS",
            "CHAT",
            "FLAGS",
            "REPEAT",
            "REF",
            "REF_STEPS",
            "REF_SAMPLES",
            "REF_SET",
        )
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), "job"],
        env=clean | {"HOME": str(tmp_path)} | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return (tmp_path / "calls.log").read_text().splitlines(), done.stdout


def test_the_curve_trains_with_the_pipeline_and_its_drafters_are_benched(tmp_path: Path) -> None:
    calls, out = _job(tmp_path, SAMPLES="400", CURVE="100,200", PROMPTS="8")
    assert len(calls) == 2
    assert calls[0] == "drafter --recipe hopper-sm90 --samples 400 --curve 100,200"
    assert calls[1].startswith("bench --recipe hopper-sm90 --spec eagle3 --drafter @curve --k 3 --concurrency 1,8")
    assert "--chat --stop-at-eos" in calls[1] and "--num-prompts 8" in calls[1]
    assert "--repeat 1 " in calls[1]  # one repeat unless asked
    assert out.splitlines()[-1].startswith("JOB DONE")


def test_repeat_measures_every_configuration_that_many_times(tmp_path: Path) -> None:
    calls, _ = _job(tmp_path, CURVE="", DRAFTERS="@eagle3-trained", REPEAT="3")
    assert calls[0] == "drafter --recipe hopper-sm90"
    assert "--drafter @eagle3-trained --k 3 --concurrency 1,8 --repeat 3 --dataset sharegpt" in calls[1]


def test_the_reference_trainer_is_the_one_ref_names_and_its_drafter_is_benched(tmp_path: Path) -> None:
    drafters = tmp_path / ".cache" / "specrig" / "drafters" / "hopper-sm90"
    (drafters / "specforge-eagle3-abc").mkdir(parents=True)
    (drafters / "speculators-eagle3-old").mkdir()
    env = {"SAMPLES": "4000", "CURVE": "", "DRAFTERS": "@eagle3-trained", "REF_STEPS": "auto"}
    calls, out = _job(tmp_path, REF="specforge", REF_SET="training.attention_backend=sdpa data.max_length=512", **env)
    assert calls[1] == (
        "drafter --recipe hopper-sm90 --samples 4000 --reference specforge --reference-steps auto "
        "--reference-set training.attention_backend=sdpa --reference-set data.max_length=512"
    )
    assert f"--drafter @eagle3-trained,{drafters / 'specforge-eagle3-abc'} " in calls[2]
    assert "JOB reference done" in out
    (tmp_path / "default").mkdir()
    calls, _ = _job(tmp_path / "default", **env)
    assert calls[1].endswith("--reference speculators --reference-steps auto")  # the default reference


def test_curve_last_benches_the_pipelines_drafter_first_then_trains_the_curve(tmp_path: Path) -> None:
    """CURVE_LAST=1: a lease that runs short has the pipeline's drafter online before the curve."""
    calls, out = _job(tmp_path, SAMPLES="400", CURVE="100,200", CURVE_LAST="1", FLAGS="--batch-tokens 8192")
    assert [c.split()[0] for c in calls] == ["drafter", "bench", "drafter"]
    assert calls[0] == "drafter --recipe hopper-sm90 --samples 400 --batch-tokens 8192"
    assert "--drafter @eagle3-trained " in calls[1]  # no curve yet to serve
    assert calls[2] == "drafter --recipe hopper-sm90 --samples 400 --batch-tokens 8192 --curve 100,200"
    lines = [x for x in out.splitlines() if x.startswith("JOB")]
    assert [x.split(" after")[0] for x in lines] == [
        "JOB drafter done",
        "JOB chat bench done",
        "JOB curve done",
        "JOB DONE",
    ]


def test_curve_last_with_nothing_to_bench_still_trains_the_curve(tmp_path: Path) -> None:
    calls, out = _job(tmp_path, CURVE="100", CURVE_LAST="1", DRAFTERS="")
    assert calls == ["drafter --recipe hopper-sm90", "drafter --recipe hopper-sm90 --curve 100"]
    assert out.splitlines()[-1].startswith("JOB DONE") and out.splitlines()[-1].endswith("no drafter to bench")
