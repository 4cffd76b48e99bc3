"""Lists the distributions an interpreter imports (first on sys.path wins), with
the sha256 of the archive each came from where it is recorded (PEP 610), torch's
CUDA version read from torch/version.py, the site-packages folders, and, with
argument "1", every installed file re-hashed against its RECORD; the RECORD of
the distributions named (comma-separated) in the second argument. Prints JSON.

Runs inside the interpreter under inspection (``specrig env --check``): the
standard library only, Python 3.8 or newer, no import of the packages listed."""

import base64
import hashlib
import importlib.metadata as md
import json
import re
import sys

deep = sys.argv[1] == "1"
record_of = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else set()
out = {
    "executable": sys.executable,
    "version": ".".join(map(str, sys.version_info[:3])),
    "prefix": sys.prefix,
    "dists": [],
    "torch_cuda": None,
    "site": [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))],
}
seen = set()
for d in md.distributions():
    name = d.metadata["Name"]
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:  # the first on sys.path is the one imported
        continue
    seen.add(key)
    entry = {"name": key, "version": d.version, "archive_sha256": None, "modified": [], "checked": 0}
    try:
        du = json.loads(d.read_text("direct_url.json") or "null")
        info = (du or {}).get("archive_info") or {}
        h = (info.get("hashes") or {}).get("sha256") or (info.get("hash") or "").partition("sha256=")[2]
        entry["archive_sha256"] = h or None
    except ValueError:
        pass
    if key == "torch":
        try:
            text = d.locate_file("torch/version.py").read_text()
            m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([0-9.]+)['\"]", text, re.M)
            out["torch_cuda"] = m.group(1) if m else None
        except OSError:
            pass
    if key in record_of:  # its RECORD (path, sha256) pairs, to compare with a wheel's
        entry["record"] = [[str(f), f.hash.value] for f in d.files or () if f.hash and f.hash.mode == "sha256"]
    if deep:
        for f in d.files or ():
            if not f.hash or f.hash.mode != "sha256" or str(f).endswith(".pyc"):
                continue  # bytecode is derived: an install compiles it again
            try:
                data = f.locate().read_bytes()
            except OSError:
                entry["modified"].append(str(f) + " (missing)")
                continue
            entry["checked"] += 1
            got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if got != f.hash.value:
                entry["modified"].append(str(f))
    out["dists"].append(entry)
print(json.dumps(out))
