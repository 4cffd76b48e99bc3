"""Bad input ends with specrig's own error: an exit code, a message naming the
input, a hint naming the fix, never a traceback. One row per case, each run
through the real command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError

CASES = [
    # (id, files to write {name: bytes}, argv, message fragment)
    ("drafter-config-list", {"d/config.json": b"[]"}, ["drafter-check", "d"], "holds a JSON list, not an object"),
    (
        "drafter-ids-not-ints",
        {"d/config.json": b'{"eagle_aux_hidden_state_layer_ids": ["a", 2]}'},
        ["drafter-check", "d"],
        "must be a list of layer numbers",
    ),
    ("drafter-config-binary", {"d/config.json": b"\xff\xfe\x00"}, ["drafter-check", "d"], "is not UTF-8 text"),
    ("drafter-config-not-json", {"d/config.json": b"{nope"}, ["drafter-check", "d"], "is not valid JSON"),
    ("drafter-missing", {}, ["drafter-check", "nowhere"], "no drafter config at"),
    ("env-unknown", {}, ["env", "--recipe", "cpu", "--env", "nosuch"], "has no environment 'nosuch'"),
    ("recipe-unknown", {}, ["bench", "--recipe", "nosuch"], "unknown recipe 'nosuch'"),
    (
        "recipe-a-folder",
        {"r/x.toml": b""},
        ["env", "--recipe", "r"],
        "recipe r is a folder: --recipe takes a recipe .toml",
    ),
    ("bind-override", {}, ["bench", "--recipe", "cpu", "--engine-arg=--host=0.0.0.0"], "sets --host"),
    ("port-override", {}, ["bench", "--recipe", "cpu", "--engine-arg=--port=9"], "sets --port"),
    ("custom-needs-path", {}, ["bench", "--recipe", "cpu", "--dataset", "custom"], "needs --dataset-path"),
    (
        "path-needs-custom",
        {"p.jsonl": b'{"prompt": "x"}\n'},
        ["bench", "--recipe", "cpu", "--dataset-path", "p.jsonl"],
        "is for --dataset custom",
    ),
    (
        "custom-not-json",
        {"p.jsonl": b'{"prompt": "a"}\n{"prompt": \n'},
        ["bench", "--recipe", "cpu", "--dataset", "custom", "--dataset-path", "p.jsonl"],
        "p.jsonl:2: not JSON",
    ),
    (
        "custom-bad-length",
        {"p.jsonl": b'{"prompt": "a", "output_len": -3}\n'},
        ["bench", "--recipe", "cpu", "--dataset", "custom", "--dataset-path", "p.jsonl"],
        "p.jsonl:1: 'output_len' must be a whole number >= 1",
    ),
    (
        "custom-no-prompt",
        {"p.jsonl": b'\n{"text": "a"}\n'},
        ["bench", "--recipe", "cpu", "--dataset", "custom", "--dataset-path", "p.jsonl"],
        "p.jsonl:2: 'prompt' must be a non-empty string",
    ),
    (
        "concurrency-text",
        {},
        ["bench", "--recipe", "cpu", "--concurrency", "x"],
        "--concurrency: Input should be a valid integer",
    ),
    (
        "k-out-of-range",
        {},
        ["bench", "--recipe", "cpu", "--spec", "ngram", "--k", "99"],
        "--k: Input should be less than or equal to 16",
    ),
    ("spec-unknown", {}, ["bench", "--recipe", "cpu", "--spec", "nope"], "no speculative configuration 'nope'"),
    ("report-nothing", {}, ["report", "nowhere"], "nowhere does not exist"),
    ("report-truncated", {"run/summary.json": b'{"specrig_summary": 2, "rec'}, ["report", "run"], "is truncated"),
    (
        "python-not-python",
        {},
        ["bench", "--recipe", "cpu", "--python", "/bin/true"],
        "did not answer specrig's package probe",
    ),
    (
        "python-echo",
        {},
        ["bench", "--recipe", "cpu", "--python", "/bin/echo"],
        "did not answer specrig's package probe",
    ),
    ("python-missing", {}, ["bench", "--recipe", "cpu", "--python", "nowhere/python"], "does not exist"),
    (
        "bundle-into-a-folder",
        {"keep.txt": b"mine"},
        ["bundle", "--recipe", "cpu", "--out", "."],
        "exists and is not a bundle",
    ),
    (
        "kit-into-a-folder",
        {"keep.txt": b"mine"},
        ["kit", "--recipe", "hopper-sm90", "--split-mb", "60", "--out", "."],
        "exists and is not a kit",
    ),
    ("kit-split-zero", {}, ["kit", "--recipe", "cpu", "--split-mb", "0", "--out", "k"], "must hold at least 1 MB"),
    (
        "kit-engine-unknown",
        {},
        ["kit", "--recipe", "cpu", "--engine", "vllm,nosuch", "--split-mb", "60", "--out", "k"],
        "--engine nosuch: recipe 'cpu' has no such engine",
    ),
    (
        "kit-drafter-missing",
        {},
        ["kit", "--recipe", "cpu", "--split-mb", "60", "--drafter", "nowhere", "--out", "k"],
        "--drafter nowhere is not a folder",
    ),
    (
        "stall-timeout-zero",
        {},
        ["bench", "--recipe", "cpu", "--stall-timeout", "0"],
        "--stall-timeout: Input should be greater than 0",
    ),
]


@pytest.mark.parametrize(("files", "argv", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_named_without_a_traceback(tmp_path: Path, files: dict, argv: list[str], fragment: str) -> None:
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "specrig.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"},
    )
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert proc.returncode not in (0, 1), f"exit {proc.returncode}: {out[-2000:]}"
    assert fragment in out, out[-2000:]
    assert "hint:" in out, out[-2000:]


def test_one_broken_recipe_does_not_break_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default-recipe policy loads every recipe to match the GPUs; a broken file is skipped, said so."""
    from specrig.core.log import log
    from specrig.core.paths import repo_root
    from specrig.recipe.choose import default_recipe_name

    root = tmp_path / "root"
    (root / "recipes").mkdir(parents=True)
    for f in (repo_root() / "recipes").glob("*.toml"):
        (root / "recipes" / f.name).write_bytes(f.read_bytes())
    (root / "recipes" / "aaa-broken.toml").write_text("[recipe\nname = ")
    monkeypatch.setenv("SPECRIG_ROOT", str(root))
    with log.console.capture() as captured:
        assert default_recipe_name({"9.0"}) == "hopper-sm90"
    assert "skipping recipes/aaa-broken.toml" in captured.get()
    assert default_recipe_name(set()) == "cpu"  # no GPU: no recipe file is read at all
    with pytest.raises(ConfigError):
        from specrig.recipe.schema import load_recipe

        load_recipe("aaa-broken")
