"""Repack a wheel without some of its files, byte-for-byte reproducibly.

Used for the hopper-sm90 recipe: the vLLM 0.26.0 wheel (303.7 MB) carries
kernels a dense model on SM90 never loads (FlashAttention-2, the MoE kernels,
the opt-in Rust front end). Without them it fits size-limited transfers.

Every kept entry is copied with its original compressed bytes (no
recompression, so the result does not depend on the local zlib); the RECORD
loses the dropped files' lines and is stored uncompressed; the file name gets
a build tag. Same input wheel + same drop list -> the same output bytes and so
the same sha256, which is recorded like any built wheel (the wheelhouse entry
under a fingerprint of the inputs, plus the recipe environment's built-wheel
record). The hash check is never weakened: the repacked wheel is a new file
with its own hash.

    specrig repack SOURCE.whl --source-sha256 HEX --drop 'vllm/vllm-rs' ... \\
        --build-tag 0sm90 --out DIR [--wheelhouse DIR --record recipes/RECIPE.ENV.built.toml]
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import struct
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specrig.builder.wheelhouse import fingerprint, store_wheel
from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import BuildError, ConfigError, HashMismatchError
from specrig.lock.built import BuiltWheel, add_wheel

__all__ = ["repack", "repack_and_record", "Repacked"]

TOOL_VERSION = 1
_LOCAL = struct.Struct("<4s5H3L2H")  # local file header, 30 bytes
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # central directory header, 46 bytes
_END = struct.Struct("<4s4H2LH")  # end of central directory, 22 bytes
_FIXED_TIME = (2026, 1, 1, 0, 0, 0)


def _raw_record(src: io.BufferedReader, info: zipfile.ZipInfo) -> bytes:
    """The entry's local header + compressed data (+ data descriptor), verbatim."""
    src.seek(info.header_offset)
    head = src.read(_LOCAL.size)
    fields = _LOCAL.unpack(head)
    if fields[0] != b"PK\x03\x04":
        raise BuildError(f"{info.filename}: not a local file header")
    name_len, extra_len = fields[9], fields[10]
    rest = src.read(name_len + extra_len + info.compress_size)
    desc = b""
    if info.flag_bits & 0x08:
        peek = src.read(4)
        desc = peek + src.read(12 if peek == b"PK\x07\x08" else 8)
    return head + rest + desc


def _central(info: zipfile.ZipInfo, offset: int) -> bytes:
    name = info.filename.encode()
    dt = info.date_time
    dostime = dt[3] << 11 | dt[4] << 5 | dt[5] // 2
    dosdate = (dt[0] - 1980) << 9 | dt[1] << 5 | dt[2]
    head = _CENTRAL.pack(
        b"PK\x01\x02",
        info.create_version | info.create_system << 8,
        info.extract_version,
        info.flag_bits,
        info.compress_type,
        dostime,
        dosdate,
        info.CRC,
        info.compress_size,
        info.file_size,
        len(name),
        len(info.extra),
        len(info.comment),
        0,
        info.internal_attr,
        info.external_attr,
        offset,
    )
    return head + name + info.extra + info.comment


def _stored_record(name: str, data: bytes) -> tuple[bytes, zipfile.ZipInfo]:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    info.CRC = __import__("zlib").crc32(data)
    info.compress_size = info.file_size = len(data)
    info.create_system = 3
    info.create_version = info.extract_version = 20
    raw = name.encode()
    dt = info.date_time
    head = _LOCAL.pack(
        b"PK\x03\x04",
        20,
        0,
        0,
        dt[3] << 11 | dt[4] << 5 | dt[5] // 2,
        (dt[0] - 1980) << 9 | dt[1] << 5 | dt[2],
        info.CRC,
        len(data),
        len(data),
        len(raw),
        0,
    )
    return head + raw + data, info


def _tagged_name(source: Path, build_tag: str) -> str:
    parts = source.name[: -len(".whl")].split("-")
    if len(parts) != 5:
        raise ConfigError(
            f"{source.name}: expected NAME-VERSION-PY-ABI-PLATFORM.whl (no build tag yet)",
            hint="repack the wheel as published",
        )
    return "-".join(parts[:2] + [build_tag] + parts[2:]) + ".whl"


def repack(source: Path, drop: list[str], build_tag: str, out_dir: Path) -> tuple[Path, list[str]]:
    """Write the repacked wheel into out_dir; return its path and the dropped entries."""
    if not build_tag[:1].isdigit():
        raise ConfigError(f"build tag {build_tag!r} must start with a digit", hint="e.g. --build-tag 0sm90")
    out = out_dir / _tagged_name(source, build_tag)
    dropped: list[str] = []
    with zipfile.ZipFile(source) as zf, source.open("rb") as src:
        infos = zf.infolist()
        record_name = next(i.filename for i in infos if i.filename.endswith(".dist-info/RECORD"))
        wheel_name = record_name.replace("/RECORD", "/WHEEL")
        kept = []
        for info in infos:
            if any(fnmatch.fnmatchcase(info.filename, pat) for pat in drop):
                dropped.append(info.filename)
            elif info.filename not in (record_name, wheel_name):
                kept.append(info)
        if not dropped:
            raise ConfigError(
                f"no entry of {source.name} matches {drop}", hint="--drop takes globs of entry names inside the wheel"
            )
        gone = set(dropped)
        rows = [r for r in csv.reader(io.StringIO(zf.read(record_name).decode())) if r and r[0] not in gone]
        wheel_meta = zf.read(wheel_name).decode()
        wheel_meta = "".join(ln for ln in wheel_meta.splitlines(keepends=True) if not ln.startswith("Build:"))
        wheel_meta = wheel_meta.rstrip("\n") + f"\nBuild: {build_tag}\n"
        wheel_bytes = wheel_meta.encode()
        wheel_hash = "sha256=" + _b64(hashlib.sha256(wheel_bytes).digest())
        rows = [[wheel_name, wheel_hash, str(len(wheel_bytes))] if r[0] == wheel_name else r for r in rows]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        out_dir.mkdir(parents=True, exist_ok=True)
        central = []
        # a unique temp beside ``out``, renamed over it only once it passed its CRC check
        with atomic.atomic_path(out, suffix=".partial") as tmp:
            with tmp.open("wb") as dst:
                for info in kept:
                    central.append(_central(info, dst.tell()))
                    dst.write(_raw_record(src, info))
                for name, data in ((wheel_name, wheel_bytes), (record_name, buf.getvalue().encode())):
                    rec, info = _stored_record(name, data)
                    central.append(_central(info, dst.tell()))
                    dst.write(rec)
                start = dst.tell()
                blob = b"".join(central)
                if len(central) > 0xFFFF or start + len(blob) > 0xFFFFFFFF:
                    raise BuildError("the repacked wheel would need ZIP64, which specrig does not write")
                dst.write(blob)
                dst.write(_END.pack(b"PK\x05\x06", 0, 0, len(central), len(central), len(blob), start, 0))
            tmp.chmod(0o644)  # as an ordinary new file (the temp is made private)
            with zipfile.ZipFile(tmp) as check:
                bad = check.testzip()
                if bad:
                    raise BuildError(f"repacked wheel fails its CRC check at {bad}")
    return out, dropped


def _b64(digest: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass(frozen=True)
class Repacked:
    wheel: Path
    sha256: str
    size: int
    dropped: list[str]
    inputs: dict[str, object]
    fingerprint: str | None = None
    stored: Path | None = None
    record: Path | None = None


def repack_and_record(
    source: Path,
    *,
    source_sha256: str,
    drop: list[str],
    build_tag: str,
    out_dir: Path,
    wheelhouse: Path | None = None,
    record: Path | None = None,
    archs: tuple[str, ...] = (),
    cuda: str = "",
    torch: str = "",
) -> Repacked:
    """Check the source wheel's hash, repack it, and (optionally) store it in the
    wheelhouse under a fingerprint of its inputs and add it to a built-wheel record."""
    if record and not wheelhouse:
        raise ConfigError("--record needs --wheelhouse", hint="the record names the wheelhouse entry")
    want = source_sha256.removeprefix("sha256:")
    # hash the very bytes that are repacked: a private copy, hashed while it is written
    with tempfile.TemporaryDirectory(prefix="specrig-repack-") as tmp:
        copy = Path(tmp) / source.name
        h = hashlib.sha256()
        with source.open("rb") as src, copy.open("wb") as dst:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                dst.write(chunk)
        got = h.hexdigest()
        if got != want:
            raise HashMismatchError(
                f"{source} has sha256 {got}, expected {want}",
                hint="download the wheel the lock pins (pip download --no-deps NAME==VERSION)",
            )
        out, dropped = repack(copy, drop, build_tag, out_dir)
    sha = sha256_file(out)
    inputs: dict[str, object] = {
        "tool": "repack_wheel",  # fingerprint input: unchanged since the recorded repack
        "tool_version": TOOL_VERSION,
        "source": source.name,
        "source_sha256": got,
        "drop": sorted(drop),
        "build_tag": build_tag,
    }
    result = Repacked(out, sha, out.stat().st_size, dropped, inputs)
    if wheelhouse is None:
        return result
    fp = fingerprint(inputs)
    stored = store_wheel(out, wheelhouse, fp, inputs, {"dropped": dropped})
    if record:
        name, version, _build, py_tag = out.name.split("-")[:4]
        add_wheel(
            record,
            BuiltWheel(
                name=name,
                version=version,
                filename=out.name,
                sha256=sha,
                fingerprint=fp,
                archs=archs,
                cuda=cuda,
                torch=torch,
                python_tag=py_tag,
                definition="specrig.builder.repack",
                source_sha256=got,
            ),
        )
    return Repacked(out, sha, result.size, dropped, inputs, fp, stored, record)
