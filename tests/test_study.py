"""``specrig study``: a study file checked by each command's own parser and models (a bad key or
value named by its dotted key and the file, before anything runs); real studies run into one
folder (benches attached to the synthetic server, no engine, and ``specrig report`` over them),
skipped when unchanged, rerun when an input or an output changed, a failed step blocking only
what reads it; a detached study stopped mid-step, leaving no process, and run again to the end;
a study folder packed into volumes and read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from process_support import group_alive
from specrig.cli import parser_for
from specrig.cli.study_argv import StudyCommandLine
from specrig.core.errors import ConfigError, HashMismatchError
from specrig.lab.options import BenchOptions
from specrig.serve.server import free_port
from specrig.serve.synthetic import Behaviour, serve_in_process
from specrig.study.plan import command_line, make_plan

ROOT = Path(__file__).resolve().parents[1]
COMPILE_MODES = ROOT / "studies" / "2026-12-07-compile-modes" / "study.toml"
TRAINING_BUDGET = ROOT / "studies" / "2026-12-06-training-budget" / "study.toml"
COMMON = 'recipe = "cpu"\n'
BENCH = 'run = "bench"\nmemory_bandwidth = 10\nmax_tokens = 3\nwarmup = 0\n'


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    # fast: a bench of 5 story prompts in about a second; slow: 1.5 s before each first token
    with (
        serve_in_process(Behaviour(token_delay_s=0.001)) as fast,
        serve_in_process(Behaviour(first_token_delay_s=1.5, token_delay_s=0.001)) as slow,
    ):
        yield {"fast": fast.base_url, "slow": slow.base_url}


def _env(tmp_path: Path) -> dict[str, str]:
    return os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}


def specrig(tmp_path: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specrig", "study", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(tmp_path),
    )


def _write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _problems(path: Path) -> str:
    with pytest.raises(ConfigError) as ei:
        make_plan(path, StudyCommandLine(), path.parent / "out")
    assert ei.value.exit_code == 2
    return ei.value.message


# --------------------------------------------------------------------------- checked before anything runs


def test_bad_keys_and_values_are_named_by_dotted_key_and_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[study]\nname = "bad"\nrecipe = "cpu"\n'
        '[[step]]\nname = "chat"\nrun = "bench"\nconcurency = [1, 8]\nchat = "yes"\n'
        '[[step]]\nname = "k0"\nrun = "bench"\nk = [0, 3]\nspec = "eagle3"\n'
        '[[step]]\nname = "both"\nrun = "bench"\nconcurrency = [1]\nrequest_rate = [2.0]\n'
        '[[step]]\nname = "port"\nrun = "bench"\nengine_arg = ["--port", "9"]\n'
        '[[step]]\nname = "placed"\nrun = "bench"\nresults = "/elsewhere"\n'
        '[[step]]\nname = "side"\nrun = "report"\nruns = ["step:nope"]\n'
        '[[step]]\nname = "train"\nrun = "drafter"\nsamples = -3\ncurve = "a,b"\nlossx = "all"\n',
    )
    said = _problems(path)
    assert str(path) in said.splitlines()[0]
    assert "step.chat.concurency: `specrig bench` has no option --concurency; did you mean 'concurrency'?" in said
    assert "step.chat.chat: is a flag: write true or false, got 'yes'" in said
    assert "step.k0.k.0: Input should be greater than or equal to 1" in said  # BenchOptions' own check
    assert "step.both: give --concurrency or --request-rate, not both" in said
    assert "step.port: --engine-arg sets --port" in said  # the bench's recipe checks (check_options)
    assert "step.placed.results: the study places each step's output" in said
    assert "step.side.runs: step:nope names no earlier step" in said
    assert "step.train.lossx: `specrig drafter` has no option --lossx" in said
    fixed = path.read_text().replace('lossx = "all"\n', "")
    said = _problems(_write(tmp_path, fixed))
    assert "step.train.samples: Input should be greater than or equal to 1" in said  # DrafterSettings
    assert "step.train: --curve: cannot read 'a,b'" in said  # the drafter's run flags
    assert not (tmp_path / "out").exists()  # nothing made


def test_the_file_itself_is_checked_with_did_you_mean(tmp_path: Path) -> None:
    said = _problems(_write(tmp_path, '[study]\nname = "x"\nreciep = "cpu"\n[[step]]\nname = "a"\nrun = "report"\n'))
    assert "study.reciep: unknown key; did you mean 'study.recipe'?" in said
    said = _problems(_write(tmp_path, '[study]\nname = "x"\n[[step]]\nname = "a"\nrun = "benchh"\n'))
    assert "step.a.run: 'benchh' is not a command a step runs" in said
    said = _problems(
        _write(
            tmp_path,
            '[study]\nname = "x"\n[[step]]\nname = "a-b"\nrun = "report"\nruns = ["r"]\n'
            '[[step]]\nname = "a"\nrun = "report"\nruns = ["r"]\n[step.vary.out]\nb = "x"\n',
        )
    )
    assert "step.a-b: two steps have this name" in said
    said = _problems(_write(tmp_path, "[study]\nname = 'x'\n[[step]]\nname = 'a'\nrun = 'report'\nruns = [\n"))
    assert "is not valid TOML" in said


def test_build_and_env_steps_are_checked_by_their_commands(tmp_path: Path) -> None:
    """A build step is `specrig build TARGET` checked as the build checks it before planning (the
    build, the recipe's pin, archs, imported sources); an env step as `specrig env` checks it; what
    they make is what every later step of the recipe runs on, so those steps read them."""
    path = _write(
        tmp_path,
        '[study]\nname = "b"\nrecipe = "hopper-sm90"\n'
        '[[step]]\nname = "fa"\nrun = "build"\ntarget = "flash-atn"\n'
        '[[step]]\nname = "arch"\nrun = "build"\ntarget = "sgl-kernel"\narch = ["12x"]\n'
        'import_source = ["nope=x.tar.gz"]\n'
        '[[step]]\nname = "away"\nrun = "build"\ntarget = "flash-attn"\ndetach = true\n'
        '[[step]]\nname = "env"\nrun = "env"\nengine = "tgi"\n'
        '[[step]]\nname = "off"\nrun = "env"\noffline = true\n'
        '[[step]]\nname = "side"\nrun = "report"\nruns = ["step:off"]\n',
    )
    said = _problems(path)
    assert "step.fa.target: unknown build 'flash-atn' (did you mean 'flash-attn'?" in said
    assert "step.arch.arch: not a GPU arch: '12x'" in said
    assert "step.arch.import_source: 'nope=x.tar.gz': expected NAME=ARCHIVE, NAME one of repo-cutlass" in said
    assert "step.away.detach: a step runs the build in the study's own process" in said
    assert "step.env.engine: recipe 'hopper-sm90' has no [engine.tgi] table" in said
    assert "step.off.offline: --offline needs --wheelhouse DIR" in said
    assert "step.side.runs: step:off runs `specrig env`, which makes no folder to name" in said
    good = _write(
        tmp_path,
        '[study]\nname = "b"\nrecipe = "hopper-sm90"\n'
        '[[step]]\nname = "before"\nrun = "bench"\nengine = "sglang"\n'
        '[[step]]\nname = "kernel"\nrun = "build"\ntarget = "sgl-kernel"\npython = "python3"\n'
        "offline = true\narch = 90\n"
        '[[step]]\nname = "env"\nrun = "env"\nengine = "sglang"\n'
        '[[step]]\nname = "after"\nrun = "bench"\nengine = "sglang"\n'
        '[[step]]\nname = "side"\nrun = "report"\nruns = ["step:before", "step:after"]\n',
    )
    plan = make_plan(good, StudyCommandLine(), tmp_path / "out")
    kernel = plan.step("kernel")
    assert command_line(kernel, plan.folder) == [
        "specrig", "build", "sgl-kernel", "--recipe=hopper-sm90", "--python=python3", "--offline", "--arch=90",
    ]  # fmt: skip
    ns = parser_for("build").parse_args(command_line(kernel, plan.folder)[2:])
    assert (ns.target, ns.recipe, ns.arch, ns.offline) == ("sgl-kernel", "hopper-sm90", ["90"], True)
    assert command_line(plan.step("env"), plan.folder) == ["specrig", "env", "--recipe=hopper-sm90", "--engine=sglang"]
    assert [plan.step(n).needs for n in ("before", "kernel", "env", "after", "side")] == [
        (),
        (),
        ("kernel",),
        ("kernel", "env"),
        ("before", "after"),
    ]
    assert not (tmp_path / "out").exists()


def test_the_compile_modes_study_is_the_bench_the_command_line_would_run() -> None:
    """The studies in studies/ check here, and each bench step's argv parses back, through the
    bench's own parser and BenchOptions, to the options the study file asks for."""
    plan = make_plan(COMPILE_MODES, StudyCommandLine(), Path("/nonexistent/study"))
    names = [s.name for s in plan.steps]
    modes = ["eager", "full-and-piecewise", "piecewise", "none", "full"]
    story, chat = ([f"{w}-{m}" for m in modes] for w in ("story", "chat"))
    assert names == ["drafter", *story, "check", *chat]
    assert plan.step("drafter").argv == ("--recipe=hopper-sm90", "--samples=1000", "--train-seconds=60")
    check = parser_for("bench").parse_args(command_line(plan.step("check"), plan.folder)[2:])
    opts = BenchOptions.collect(lambda n: getattr(check, n, None))
    assert opts.acceptance_check and (opts.k, opts.concurrency, opts.engine_arg) == ((1,), (1,), ())
    for step in (s for s in plan.steps[1:] if s.name != "check"):
        assert step.needs == ("drafter",)  # @eagle3-trained: the drafter this study trains
        argv = command_line(step, plan.folder)[2:]
        ns = parser_for("bench").parse_args(argv)
        opts = BenchOptions.collect(lambda n, ns=ns: getattr(ns, n, None))
        assert (opts.recipe, opts.spec, opts.drafter, opts.k) == (
            "hopper-sm90",
            ("eagle3",),
            ("@eagle3-trained",),
            (1, 3),
        )
        assert opts.results == f"/nonexistent/study/steps/{step.name}"
        mode = step.name.split("-", 1)[1]
        if mode == "eager":
            assert opts.engine_arg == ("--enforce-eager",)
        else:
            graph = mode.upper().replace("-", "_")
            assert opts.engine_arg == ("--compilation-config", f'{{"cudagraph_mode": "{graph}"}}')
        chat = step.name.startswith("chat-")
        assert (opts.dataset, opts.chat, opts.stop_at_eos) == (
            ("sharegpt", True, True) if chat else ("story", False, False)
        )
    budget = make_plan(TRAINING_BUDGET, StudyCommandLine(), Path("/nonexistent/b"))
    assert [s.argv[1:] for s in budget.steps[:3]] == [
        ("--train-seconds=150",),
        ("--train-seconds=150", "--length-bucket=64"),
        (),
    ]
    chat = budget.step("chat")
    assert chat.needs == ("train150", "bucket64", "train300")  # @eagle3-trained: the last drafter step's
    assert (
        "--drafter=@eagle3-trained" in chat.argv
        and "--concurrency=1,8" in chat.argv
        and "--num-prompts=24" in chat.argv
    )


def test_check_prints_the_plan_and_makes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "never"
    done = specrig(tmp_path, "check", str(COMPILE_MODES), "--out", str(out))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "[1/12] drafter: would run: specrig drafter --recipe=hopper-sm90 --samples=1000 --train-seconds=60" in said
    assert "[7/12] check: would run: specrig bench" in said and "--acceptance-check" in said
    assert "[12/12] chat-full: would run" in said and "valid, 12 steps; nothing was run" in said
    assert not out.exists()


# --------------------------------------------------------------------------- runs


def _study(tmp_path: Path, server: str, *, max_tokens: int = 3, extra: str = "") -> Path:
    return _write(
        tmp_path,
        f'[study]\nname = "mini"\n{COMMON}'
        f'[[step]]\nname = "fast"\n{BENCH.replace("max_tokens = 3", f"max_tokens = {max_tokens}")}endpoint = "{server}"\n'
        '[[step]]\nname = "side"\nrun = "report"\nruns = ["step:fast"]\n' + extra,
    )


def _state(out: Path) -> dict:
    return json.loads((out / "state.json").read_text())["steps"]


def test_a_study_runs_into_one_folder_and_skips_what_is_unchanged(tmp_path: Path, servers: dict[str, str]) -> None:
    study, out = _study(tmp_path, servers["fast"]), tmp_path / "out"
    done = specrig(tmp_path, "run", str(study), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[1/2] fast: specrig bench --recipe=cpu" in done.stderr and "[2/2] side: done" in done.stderr
    assert "measuring 5 story prompts" in done.stdout  # the step's own output, streamed
    assert (out / "steps" / "fast" / "summary.json").is_file() and (out / "steps" / "side" / "compare.md").is_file()
    assert (out / "report" / "compare.md").is_file() and "`" + str(out / "steps" / "fast") in (
        out / "report" / "compare.md"
    ).read_text()
    assert "measuring 5 story prompts" in (out / "logs" / "fast.log").read_text()
    m = json.loads((out / "manifest.json").read_text())
    assert (
        m["study"] == "mini"
        and m["specrig"]["version"]
        and m["host"]["cpus"] >= 1
        and m["report"] == "report/compare.md"
    )
    fast, side = m["steps"]
    assert fast["status"] == "done" and fast["exit_code"] == 0 and fast["recipe"] == "cpu"
    assert fast["recipe_digest"].startswith("sha256:") and fast["locks"]["vllm"].startswith("sha256:")
    assert fast["argv"][:3] == ["specrig", "bench", "--recipe=cpu"] and fast["options"]["max_tokens"] == 3
    assert (
        side["needs"] == ["fast"]
        and side["argv"][2] == str(out / "steps" / "fast")
        and side["ended"] >= side["started"]
    )
    first = _state(out)

    again = specrig(tmp_path, "run", str(study), "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "fast: unchanged since it last finished, skipped" in again.stderr
    assert "side: unchanged since it last finished, skipped" in again.stderr
    assert _state(out) == first

    (out / "steps" / "side" / "compare.md").unlink()  # an output gone: that step runs again
    again = specrig(tmp_path, "run", str(study), "--out", str(out))
    assert "fast: unchanged" in again.stderr and "[2/2] side: done" in again.stderr
    assert _state(out)["fast"] == first["fast"] and (out / "steps" / "side" / "compare.md").is_file()

    _study(tmp_path, servers["fast"], max_tokens=4)  # an input changed: the step, and what reads it
    again = specrig(tmp_path, "run", str(study), "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[1/2] fast: done" in again.stderr and "[2/2] side: done" in again.stderr
    assert _state(out)["fast"]["started"] > first["fast"]["started"]


def test_steps_runs_only_the_steps_named_once_what_they_read_has_finished(
    tmp_path: Path, servers: dict[str, str]
) -> None:
    study, out = _study(tmp_path, servers["fast"]), tmp_path / "out"
    unknown = specrig(tmp_path, "run", str(study), "--out", str(out), "--steps", "fast,nope")
    assert unknown.returncode == 2 and "--steps: nope: no such step" in unknown.stderr
    assert "its steps: fast, side" in unknown.stderr and "Traceback" not in unknown.stderr
    early = specrig(tmp_path, "run", str(study), "--out", str(out), "--steps", "side")
    assert early.returncode == 2 and "side reads fast: neither named nor finished in" in " ".join(early.stderr.split())
    assert not out.exists()  # refused before the folder was made
    first = specrig(tmp_path, "run", str(study), "--out", str(out), "--steps", "fast")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "[1/1] fast: done" in first.stderr and "side" not in _state(out)
    second = specrig(tmp_path, "run", str(study), "--out", str(out), "--steps", "side")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "[1/1] side: done" in second.stderr and "fast:" not in second.stderr
    assert _state(out)["side"]["status"] == "done" and (out / "steps" / "side" / "compare.md").is_file()


def test_a_failed_step_blocks_only_the_steps_that_read_it(tmp_path: Path, servers: dict[str, str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    extra = f'[[step]]\nname = "other"\n{BENCH}endpoint = "{servers["fast"]}"\n'
    study, out = _study(tmp_path, dead, extra=extra), tmp_path / "out"
    done = specrig(tmp_path, "run", str(study), "--out", str(out))
    assert done.returncode == 12, done.stderr[-3000:]
    said = " ".join(done.stderr.split())
    assert "2 of 3 steps did not finish" in said and "Traceback" not in done.stdout + done.stderr
    state = _state(out)
    assert state["fast"]["status"] == "failed" and state["fast"]["exit_code"] != 0
    assert state["side"]["status"] == "blocked" and "reads step fast" in state["side"]["note"]
    assert state["other"]["status"] == "done"
    assert [s["name"] for s in json.loads((out / "manifest.json").read_text())["steps"]] == ["fast", "side", "other"]


def test_a_detached_study_stopped_mid_step_leaves_nothing_and_runs_again(
    tmp_path: Path, servers: dict[str, str]
) -> None:
    study, out = _study(tmp_path, servers["slow"]), tmp_path / "out"
    started = specrig(tmp_path, "run", str(study), "--out", str(out), "--detach")
    assert started.returncode == 0, started.stderr
    detached = json.loads((out / "detached.json").read_text())
    end = time.monotonic() + 120
    while not (out / "state.json").is_file() or not _state(out).get("fast", {}).get("pid"):
        assert time.monotonic() < end, (out / next(out.glob("*.console.log")).name).read_text()
        time.sleep(0.2)
    step_pid = _state(out)["fast"]["pid"]
    end = time.monotonic() + 60
    while "measuring" not in (out / "logs" / "fast.log").read_text():  # the bench is mid-measurement
        assert time.monotonic() < end
        time.sleep(0.2)
    status = specrig(tmp_path, "status", str(out))
    assert status.returncode == 0 and "[1/2] fast: running" in status.stdout and "[2/2] side: not run" in status.stdout
    watcher = subprocess.Popen(
        [sys.executable, "-m", "specrig", "study", "follow", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert watcher.stdout is not None and "fast: running" in watcher.stdout.readline()
    watcher.terminate()  # a `timeout` around follow: the watching ends, the study does not
    _, said = watcher.communicate(timeout=30)
    assert watcher.returncode == 143 and "the study goes on" in said and "every process" not in said
    assert group_alive(detached["pid"]) and _state(out)["fast"]["status"] == "running"

    stopped = specrig(tmp_path, "stop", str(out))
    assert stopped.returncode == 12, stopped.stderr
    assert "stopped" in stopped.stdout.splitlines()[0]
    assert group_alive(detached["pid"]) == [] and group_alive(step_pid) == []
    assert _state(out)["fast"]["status"] == "interrupted" and "side" not in _state(out)

    again = specrig(tmp_path, "run", str(study), "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[1/2] fast: done" in again.stderr and "[2/2] side: done" in again.stderr
    status = specrig(tmp_path, "status", str(out))
    assert "done" in status.stdout.splitlines()[0] and "[1/2] fast: done" in status.stdout


def test_a_study_folder_packs_into_volumes_and_reads_back(tmp_path: Path, servers: dict[str, str]) -> None:
    study, out = _study(tmp_path, servers["fast"]), tmp_path / "out"
    assert specrig(tmp_path, "run", str(study), "--out", str(out)).returncode == 0
    (out / "steps" / "fast" / "noise.dat").write_bytes(os.urandom(2_500_000))  # does not compress: several volumes
    (out / "steps" / "fast" / "model.safetensors").write_bytes(b"weights" * 1000)
    packed = specrig(tmp_path, "pack", str(out), "--split-mb", "1", "--out", str(tmp_path / "packed"))
    assert packed.returncode == 0, packed.stderr
    vols = sorted((tmp_path / "packed").glob("vol-*"))
    assert len(vols) >= 3 and all(sum(f.stat().st_size for f in v.iterdir()) <= 10**6 for v in vols)

    back = specrig(tmp_path, "unpack", str(tmp_path / "packed"), "--out", str(tmp_path / "home"))
    assert back.returncode == 0, back.stderr
    home = tmp_path / "home"
    assert (home / "steps" / "fast" / "noise.dat").read_bytes() == (out / "steps" / "fast" / "noise.dat").read_bytes()
    assert not (home / "steps" / "fast" / "model.safetensors").exists()  # weights stay behind
    assert json.loads((home / "manifest.json").read_text()) == json.loads((out / "manifest.json").read_text())
    status = specrig(tmp_path, "status", str(home))
    assert "[2/2] side: done" in status.stdout

    part = next(p for p in vols[1].iterdir() if p.name != "pack.toml")
    part.write_bytes(b"x" + part.read_bytes()[1:])  # a damaged volume is named, nothing made
    from specrig.study.pack import unpack

    with pytest.raises(HashMismatchError, match="is damaged"):
        unpack(tmp_path / "packed", tmp_path / "home2")
    assert not (tmp_path / "home2").exists()
