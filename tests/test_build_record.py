"""The built-wheel record (specrig.built): its own file beside the lock, typed, written atomically,
one wheel per name; and where sdists come from (no pip internals)."""

from __future__ import annotations

import os
import tomllib

import pytest

from specrig.builder.sources import index_url
from specrig.core.errors import ConfigError
from specrig.lock.built import BuiltWheel, add_wheel, read_record, record_path, write_record


def wheel(name: str = "flash-attn", version: str = "2.8.3+sm120.cu130.torch291", sha: str = "a") -> BuiltWheel:
    return BuiltWheel(
        name=name,
        version=version,
        filename=f"{name.replace('-', '_')}-{version}-cp312-cp312-linux_x86_64.whl",
        sha256=sha * 64,
        fingerprint="0123456789abcdef" * 2,
        archs=("120",),
        cuda="13.0.88",
        torch="2.9.1+cu128",
        python_tag="cp312",
        definition=f"{name}.toml",
        source_sha256="b" * 64,
    )


def test_record_sits_beside_the_lock(tmp_path):
    assert record_path(tmp_path / "blackwell-sm120.vllm.lock") == tmp_path / "blackwell-sm120.vllm.built.toml"
    assert read_record(tmp_path / "absent.built.toml").wheel == ()


def test_add_replaces_by_name_and_round_trips(tmp_path):
    path = tmp_path / "r.vllm.built.toml"
    add_wheel(path, wheel())
    add_wheel(path, wheel("sgl-kernel", "0.3.21+sm120.cu130.torch291"))
    rebuilt = wheel(version="2.8.3+sm90.cu130.torch291", sha="c")
    record = add_wheel(path, rebuilt)  # same name (any spelling): replaces
    assert [w.name for w in record.wheel] == ["flash-attn", "sgl-kernel"]
    assert read_record(path) == record
    assert read_record(path).versions() == {
        "flash-attn": "2.8.3+sm90.cu130.torch291",
        "sgl-kernel": "0.3.21+sm120.cu130.torch291",
    }
    text = path.read_text()
    assert "http" not in text and str(tmp_path) not in text  # names and hashes only
    assert tomllib.loads(text)["schema"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left beside it


def test_a_malformed_record_names_the_key(tmp_path):
    path = tmp_path / "r.main.built.toml"
    write_record(path, read_record(path).with_wheel(wheel()))
    path.write_text(path.read_text().replace('cuda = "13.0.88"', 'cudaa = "13.0.88"').replace("a" * 64, "xyz"))
    with pytest.raises(ConfigError) as exc:
        read_record(path)
    msg = str(exc.value)
    assert "wheel.0.sha256:" in msg and "'xyz'" in msg
    assert "wheel.0.cudaa: unknown key" in msg and "wheel.0.cuda: required key is missing" in msg


def test_a_record_from_before_the_rename_reads_under_the_room_s_name_now(tmp_path):
    """Records written before the build room became ``specrig.builder`` name ``specrig.build.repack``:
    they still read, under the module's name now, and the next write records that name."""
    path = tmp_path / "r.vllm.built.toml"
    write_record(
        path, read_record(path).with_wheel(wheel().model_copy(update={"definition": "specrig.builder.repack"}))
    )
    path.write_text(path.read_text().replace("specrig.builder.repack", "specrig.build.repack"))
    (old,) = read_record(path).wheel
    assert old.definition == "specrig.builder.repack"
    assert wheel().definition == "flash-attn.toml"  # a definition file's name is left as it is
    add_wheel(path, wheel("sgl-kernel", "0.4.5"))
    assert "specrig.build.repack" not in path.read_text() and "specrig.builder.repack" in path.read_text()


def test_sdists_come_from_specrig_s_index_or_uv_s(monkeypatch):
    monkeypatch.setenv("SPECRIG_INDEX_URL", "http://mirror.invalid/simple")
    assert index_url() == "http://mirror.invalid/simple"
    monkeypatch.delenv("SPECRIG_INDEX_URL")
    for var in [v for v in os.environ if v.startswith(("UV_INDEX", "UV_DEFAULT_INDEX"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://uv-mirror.invalid/simple")  # uv's own setting decides
    assert index_url() == "http://uv-mirror.invalid/simple"


def test_a_cross_build_says_why_it_is_not_recorded(capsys) -> None:
    """A build for an arch the recipe's GPUs cannot run (sm_120 on hopper-sm90) is left out of its record
    on purpose, and the build repeats the plan's reason (not "no [builds] table in the recipe", which
    would be wrong: studies/2026-12-04-sm120-cross-builds)."""
    from types import SimpleNamespace

    from specrig.builder.execute import _record
    from specrig.builder.plan import BuildRequest, make_plan

    plan = make_plan(BuildRequest(target="sglang-kernel", recipe="hopper-sm90", archs=("120",), plan_only=True))
    assert plan.record_path is None
    _record(plan, SimpleNamespace())
    out = capsys.readouterr()
    said = out.out + out.err
    assert "not recorded in hopper-sm90.sglang.built.toml: a build for sm_120 cannot run on hopper-sm90's GPUs" in said
    assert "no [builds] table" not in said
