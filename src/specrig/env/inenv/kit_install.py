#!/usr/bin/env python3
"""Install a specrig kit (``specrig kit``) on a host with no network. Python 3.11+ standard library only.

    python3 KIT/vol-001/install.py [--into DIR] [--python PY]

Checks every part of every volume against ``kit.toml`` (a missing or altered one is named,
nothing is installed), joins the files into DIR/wheels, takes uv out of its wheel, installs
specrig and what it needs to start into a venv DIR/venv with that uv (offline, hash-checked), runs
``specrig env --offline`` for each engine of the kit and writes DIR/specrig, the launcher:
``DIR/specrig bench --recipe R --engine E ...``. A kit made with ``--build NAME`` also carries that
build's sources: they go to DIR/sources, the launcher's source cache, for
``DIR/specrig build NAME --offline``. Re-running it redoes only what is missing."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

MANIFEST = "kit.toml"
FIX = "copy {what} again, whole, from the machine that made the kit (or make the kit again: specrig kit)"


class Refused(Exception):
    """Ends the install with this message and exit code 2 (no traceback)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def _write_atomic(target: Path, write) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def verify(kit: Path, manifest: dict, text: str) -> None:
    """Every volume present and from this kit, every part there with its size and sha256."""
    problems = []
    volumes = sorted({p["path"].split("/")[0] for f in manifest["files"] for p in f["parts"]})
    for vol in volumes:
        if not (kit / vol).is_dir():
            held = sorted({f["filename"] for f in manifest["files"] for p in f["parts"] if p["path"].startswith(vol)})
            problems.append(f"volume {vol} is missing from {kit} (it holds parts of {', '.join(held)})")
        elif (kit / vol / MANIFEST).is_file() and (kit / vol / MANIFEST).read_text() != text:
            problems.append(f"volume {vol} belongs to another kit (its {MANIFEST} differs from this one's)")
    for f in manifest["files"]:
        for p in f["parts"]:
            path = kit / p["path"]
            if not (kit / p["path"].split("/")[0]).is_dir():
                continue  # said above, once per volume
            if not path.is_file():
                problems.append(f"{p['path']} is missing (part of {f['filename']})")
            elif (size := path.stat().st_size) != p["size"]:
                problems.append(f"{p['path']} is altered: {size} bytes, the kit records {p['size']}")
            elif (got := _sha256(path)) != p["sha256"]:
                problems.append(f"{p['path']} is altered: sha256 {got}, the kit records {p['sha256']}")
    if problems:
        what = "the volume(s) named above" if any("volume" in p for p in problems) else "the file(s) named above"
        raise Refused(
            "the kit is incomplete or damaged:\n" + "".join(f"  - {p}\n" for p in problems) + FIX.format(what=what)
        )


def join(kit: Path, f: dict, target: Path) -> Path:
    """The file ``f`` at ``target``, its parts joined, checked against its sha256."""
    if target.is_file() and target.stat().st_size == f["size"] and _sha256(target) == f["sha256"]:
        return target

    def write(out) -> None:
        for p in f["parts"]:
            with open(kit / p["path"], "rb") as src:
                shutil.copyfileobj(src, out, 8 << 20)

    _write_atomic(target, write)
    if _sha256(target) != f["sha256"]:
        target.unlink()
        raise Refused(f"{f['filename']} joined from its parts does not have the sha256 the kit records")
    return target


def extract(tar: Path, dest: Path) -> None:
    """``tar`` unpacked as ``dest`` (staged beside it, swapped in)."""
    stage = dest.with_name(f".{dest.name}.{os.getpid()}.new")
    shutil.rmtree(stage, ignore_errors=True)
    with tarfile.open(tar) as t:
        t.extractall(stage, filter="data")
    old = dest.with_name(f".{dest.name}.{os.getpid()}.old")
    if dest.exists():
        os.replace(dest, old)
    os.replace(stage, dest)
    shutil.rmtree(old, ignore_errors=True)


def uv_from_wheel(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
        _write_atomic(dest, lambda out: out.write(z.read(member)))
    dest.chmod(0o755)
    return dest


LAUNCHER = """#!/bin/sh
# specrig from the kit installed here (install.py): its own venv over the host's Python (whose
# packages it sees after its own: what the recipe's host_provides names), offline.
# No PYTHONPATH: what specrig needs stays in its venv, out of the engines' environments.
D={into}
export SPECRIG_ROOT="$D/checkout" SPECRIG_HOST_PYTHON="${{SPECRIG_HOST_PYTHON:-{python}}}"
export SPECRIG_UV="$D/bin/uv" PATH="$D/bin:$PATH"
export UV_OFFLINE=1 UV_NO_INDEX=1 UV_FIND_LINKS="$D/wheels"
{sources}exec "$D/venv/bin/python" -m specrig.cli "$@"
"""


def _site_dirs(python: str) -> list[str]:
    code = "import json, site; print(json.dumps(site.getsitepackages()))"
    return json.loads(subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout)


def see_host(venv_python: Path, host_python: str) -> None:
    """The venv sees the host interpreter's packages after its own (what host_provides names): a .pth
    file, as specrig's layered environments do, since the host's Python may itself be a venv."""
    own = _site_dirs(str(venv_python))[0]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in _site_dirs(host_python))
    _write_atomic(Path(own) / "specrig-host-provides.pth", lambda out: out.write(lines.encode()))


def install(kit: Path, into: Path, python: str, run_env: bool) -> Path:
    text = (Path(__file__).parent / MANIFEST).read_text()
    manifest = tomllib.loads(text)
    verify(kit, manifest, text)
    files = manifest["files"]
    print(f"install.py: {len(files)} files in {len(list(kit.glob('vol-*')))} volumes checked", flush=True)
    wheels = into / "wheels"
    for f in files:
        if f["kind"] == "source":  # NAME/SHA256.tar.gz, as in specrig's source cache
            join(kit, f, into / "sources" / f["name"] / f["filename"])
        elif f["kind"] in ("root", "drafter"):
            tar = join(kit, f, into / "parts" / f["filename"])
            extract(tar, into / "checkout" if f["kind"] == "root" else into / "drafters" / f["name"])
        else:
            join(kit, f, wheels / f["filename"])
    uv_file = next(f for f in files if f["kind"] == "start" and f["name"] == "uv")
    uv = uv_from_wheel(wheels / uv_file["filename"], into / "bin" / "uv")
    boot = [f for f in files if f["kind"] in ("specrig", "start")]
    req = into / "kit-requirements.txt"
    lines = "".join(f"{f['name']}=={f['version']} --hash=sha256:{f['sha256']}\n" for f in boot)
    _write_atomic(req, lambda out: out.write(lines.encode()))
    venv, stage = into / "venv", into / f".venv.{os.getpid()}.new"
    shutil.rmtree(stage, ignore_errors=True)
    offline = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    offline |= {"UV_OFFLINE": "1", "UV_NO_INDEX": "1"}
    subprocess.run(
        [str(uv), "venv", "--quiet", "--relocatable", "--python", python, str(stage)],
        check=True,
        env=offline,
    )
    cmd = [str(uv), "pip", "install", "--offline", "--no-index", "--find-links", str(wheels), "--no-deps"]
    cmd += ["--require-hashes", "--link-mode", "copy", "--compile-bytecode"]  # specrig starts without compiling
    cmd += ["--python", str(stage / "bin" / "python"), "-r", str(req)]
    print(f"install.py: installing specrig and {len(boot) - 1} packages it needs into {venv}", flush=True)
    subprocess.run(cmd, check=True, env=offline)
    see_host(stage / "bin" / "python", python)
    shutil.rmtree(venv, ignore_errors=True)
    os.replace(stage, venv)
    launcher = into / "specrig"
    builds = manifest.get("builds", [])
    sources = 'export SPECRIG_SOURCE_CACHE="${SPECRIG_SOURCE_CACHE:-$D/sources}"\n' if builds else ""
    body = LAUNCHER.format(into=shlex.quote(str(into)), python=shlex.quote(python), sources=sources)
    _write_atomic(launcher, lambda out: out.write(body.encode()))
    launcher.chmod(0o755)
    for engine in manifest["engines"] if run_env else ():
        print(f"install.py: {launcher} env --recipe {manifest['recipe']} --engine {engine} --offline", flush=True)
        args = ["env", "--recipe", manifest["recipe"], "--engine", engine, "--wheelhouse", str(wheels), "--offline"]
        subprocess.run([str(launcher), *args], check=True)
    for d in sorted((into / "drafters").glob("*")):
        print(f"install.py: drafter {d} (pass it with --drafter)")
    for name in builds:
        print(f"install.py: build {name}: {launcher} build {name} --recipe {manifest['recipe']} --offline ...")
    what = "bench" if manifest["engines"] else f"build {builds[0]}"
    print(f"install.py: done; next: {launcher} {what} --recipe {manifest['recipe']} ...")
    return launcher


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--into", type=Path, help="where to install (default: KIT/installed)")
    p.add_argument("--kit", type=Path, default=here.parent, help="the folder holding vol-001, vol-002, ...")
    p.add_argument("--python", default=sys.executable, help="the host's interpreter (default: the one running this)")
    p.add_argument("--no-env", action="store_true", help="install specrig only, not the engines' environments")
    args = p.parse_args(argv)
    into = (args.into or args.kit / "installed").absolute()
    try:
        install(args.kit.absolute(), into, args.python, not args.no_env)
    except Refused as exc:
        print(f"install.py: error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"install.py: error: {shlex.join(map(str, exc.cmd))} failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"install.py: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
