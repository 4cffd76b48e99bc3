"""Fetching the files a lock installs into a folder, hash-checked, for bundles and kits: ``pip download
--no-deps --require-hashes`` for the recipe's platform and Python (pip is pinned with specrig; uv has no
download command), from the same sources as ``lock``, one run per source."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from pathlib import Path

from specrig.core import atomic
from specrig.core.errors import EnvError, HashMismatchError
from specrig.core.log import log
from specrig.lock.file import Lock
from specrig.lock.indexes import index_hint, sources_for
from specrig.recipe.schema import Recipe

__all__ = ["download", "pip_target"]


def pip_target(recipe: Recipe) -> list[str]:
    """pip download's target for the recipe's platform (``x86_64-manylinux_2_36`` -> ``manylinux_2_36_x86_64``)."""
    arch, _, plat = recipe.host.platform.partition("-")
    py = recipe.host.python.replace(".", "")
    args = ["--python-version", recipe.host.python, "--implementation", "cp"]
    args += ["--abi", f"cp{py}", "--abi", "abi3", "--abi", "none"]
    if not plat:
        return args
    # pip matches platform tags exactly: a manylinux_2_39 host also runs every older
    # manylinux tag (and the legacy aliases), so name them all.
    tags = [plat]
    if m := re.fullmatch(r"manylinux_2_(\d+)", plat):
        tags = [f"manylinux_2_{n}" for n in range(int(m.group(1)), 4, -1)]
        tags += ["manylinux2014"] * (int(m.group(1)) >= 17) + ["manylinux2010"] * (int(m.group(1)) >= 12)
        tags += ["manylinux1"]
    return args + [a for t in [*tags, "linux"] for a in ("--platform", f"{t}_{arch}")]


def download(recipe: Recipe, lock: Lock, dest: Path) -> None:
    sources = sources_for(recipe, lock.env)
    log.step(f"downloading {len(lock.installed_packages)} files of {lock.path.name} (pip download, hash-checked)")
    # a recipe index serves only its own packages: one download per source
    for n, (names, _, pip_args) in enumerate(sources.groups([p.name for p in lock.installed_packages]), 1):
        if not names:
            continue
        lines = "".join(p.requirement_line() + "\n" for p in lock.installed_packages if p.name in names)
        req = atomic.write_text(dest / f"specrig-bundle-requirements-{n}.txt", lines)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--progress-bar", "off"]
        cmd += ["-d", str(dest), "-r", str(req), *pip_target(recipe), *pip_args]
        tail: deque[str] = deque(maxlen=30)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            if line.startswith(("Saved", "Collecting", "File was already")):
                log.info(line.rstrip())
        rc = proc.wait()
        req.unlink(missing_ok=True)
        if rc != 0:
            text = "\n".join(tail)
            if "hash" in text.lower() and "match" in text.lower():
                raise HashMismatchError(f"a downloaded file does not have the sha256 the lock records:\n{text}")
            raise EnvError(
                f"pip download failed (exit {rc}):\n{text}",
                hint=index_hint(sources) or "check your index settings (PIP_INDEX_URL, UV_INDEX_URL, PIP_FIND_LINKS)",
            )
