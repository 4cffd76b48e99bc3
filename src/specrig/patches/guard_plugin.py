"""specrig patch guard: a vLLM general plugin that refuses to run unpatched code.

`specrig patch apply` copies this file into the engine environment's
site-packages as ``specrig_patch_guard/__init__.py`` next to ``stamp.json``
(what was applied: every target file with its patched sha256) and registers
``verify`` under the ``vllm.general_plugins`` entry-point group. vLLM calls
general plugins once in every process it starts (API server, engine core,
each worker, the model-inspection subprocess) and does not catch exceptions
they raise, so a process that would import an unpatched or edited copy stops
at start-up with the file, the expected and the found hash.

Standard library only: the engine environment does not contain specrig.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path

__all__ = ["PatchGuardError", "verify"]

_HERE = Path(__file__).resolve().parent
_verified = False


class PatchGuardError(RuntimeError):
    pass


def _hash(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _problems(stamp: dict) -> list[str]:
    site = Path(stamp["site_packages"]).resolve()
    problems = []
    for set_name, entry in stamp["sets"].items():
        label = f"{set_name} {entry['version']}"
        try:
            installed = importlib.metadata.version(entry["distribution"])
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != entry["version"]:
            problems.append(
                f"{label}: this process sees {entry['distribution']} {installed}, the patch set is for {entry['version']}"
            )
        for rel, hashes in entry["files"].items():
            module = rel[: -len(".py")].replace("/", ".")
            module = module.removesuffix(".__init__")
            loaded = sys.modules.get(module)
            origin = getattr(loaded, "__file__", None)
            if origin is None:
                top = module.split(".", 1)[0]
                spec = importlib.util.find_spec(top)
                locations = list(spec.submodule_search_locations or []) if spec else []
                origin = str(Path(locations[0]) / Path(rel).relative_to(top)) if locations else None
            if origin is None or Path(origin).resolve() != (site / rel).resolve():
                problems.append(f"{label}: {module} is imported from {origin}, not from the patched copy {site / rel}")
                continue
            found = _hash(site / rel)
            if found != hashes["patched"]:
                problems.append(f"{label}: {rel} is not the patched file (expected {hashes['patched']}, found {found})")
    return problems


def verify() -> None:
    """Entry point (``vllm.general_plugins``): check the stamp in this process."""
    global _verified
    if _verified:
        return
    stamp = json.loads((_HERE / "stamp.json").read_text(encoding="utf-8"))
    problems = _problems(stamp)
    if problems:
        raise PatchGuardError(
            "specrig patch guard: process "
            + str(os.getpid())
            + " would run unpatched code:\n  "
            + "\n  ".join(problems)
            + "\n  fix: run `nox -s patch -- status --site-packages "
            + str(stamp.get("site_packages", "SITE"))
            + "`, then `revert` and `apply` with the same --site-packages"
        )
    _verified = True
    sets = ", ".join(f"{k} {v['version']} ({len(v['patches'])} patches)" for k, v in stamp["sets"].items())
    print(f"specrig patch guard: pid {os.getpid()}: verified {sets}", file=sys.stderr)
