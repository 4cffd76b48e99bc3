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

    python tools/repack_wheel.py SOURCE.whl --source-sha256 HEX --drop 'vllm/vllm-rs' ... \\
        --build-tag 0sm90 --out DIR [--wheelhouse DIR --record recipes/RECIPE.ENV.built.toml]
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import hashlib
import io
import json
import struct
import sys
import zipfile
from pathlib import Path

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
        raise SystemExit(f"{info.filename}: not a local file header")
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
        raise SystemExit(f"{source.name}: expected NAME-VERSION-PY-ABI-PLATFORM.whl (no build tag yet)")
    return "-".join(parts[:2] + [build_tag] + parts[2:]) + ".whl"


def repack(source: Path, drop: list[str], build_tag: str, out_dir: Path) -> tuple[Path, list[str]]:
    """Write the repacked wheel into out_dir; return its path and the dropped entries."""
    if not build_tag[:1].isdigit():
        raise SystemExit("a wheel build tag must start with a digit (e.g. 0sm90)")
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
            raise SystemExit(f"no entry of {source.name} matches {drop}")
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
        tmp = out.with_suffix(".partial")
        central = []
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
                raise SystemExit("output needs ZIP64, which this tool does not write")
            dst.write(blob)
            dst.write(_END.pack(b"PK\x05\x06", 0, 0, len(central), len(central), len(blob), start, 0))
        with zipfile.ZipFile(tmp) as check:
            bad = check.testzip()
            if bad:
                raise SystemExit(f"repacked wheel fails its CRC check at {bad}")
        tmp.replace(out)
    return out, dropped


def _b64(digest: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="the wheel as published (hash-checked against --source-sha256)")
    p.add_argument("--source-sha256", required=True, help="sha256 of the source wheel (from the recipe's lock)")
    p.add_argument("--drop", action="append", required=True, help="glob of entries to leave out (repeatable)")
    p.add_argument("--build-tag", required=True, help="wheel build tag of the result, e.g. 0sm90")
    p.add_argument("--out", type=Path, required=True, help="folder for the repacked wheel")
    p.add_argument("--wheelhouse", type=Path, help="store it in this wheelhouse under its fingerprint")
    p.add_argument("--record", type=Path, help="add it to this built-wheel record (recipes/RECIPE.ENV.built.toml)")
    p.add_argument("--archs", default="", help="compute capabilities it serves, for the record (e.g. 90)")
    p.add_argument("--cuda", default="", help="CUDA it was built for, for the record (e.g. 13.0)")
    p.add_argument("--torch", default="", help="torch it was built against, for the record (e.g. 2.11.0)")
    args = p.parse_args(argv)
    if args.record and not args.wheelhouse:
        p.error("--record needs --wheelhouse (the record names the wheelhouse entry)")
    got = hashlib.sha256(args.source.read_bytes()).hexdigest()
    if got != args.source_sha256.removeprefix("sha256:"):
        print(f"error: {args.source} has sha256 {got}, expected {args.source_sha256}", file=sys.stderr)
        return 2
    out, dropped = repack(args.source, args.drop, args.build_tag, args.out)
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    inputs = {
        "tool": "repack_wheel",
        "tool_version": TOOL_VERSION,
        "source": args.source.name,
        "source_sha256": got,
        "drop": sorted(args.drop),
        "build_tag": args.build_tag,
    }
    doc = {"filename": out.name, "sha256": sha, "size": out.stat().st_size, "dropped": dropped, "inputs": inputs}
    if args.wheelhouse:
        from specrig.build.wheelhouse import fingerprint, store_wheel

        fp = fingerprint(inputs)
        stored = store_wheel(out, args.wheelhouse, fp, inputs, {"dropped": dropped})
        doc |= {"fingerprint": fp, "stored": str(stored)}
        if args.record:
            from specrig.built import BuiltWheel, add_wheel

            name, version, _build, py_tag = out.name.split("-")[:4]
            add_wheel(
                args.record,
                BuiltWheel(
                    name=name,
                    version=version,
                    filename=out.name,
                    sha256=sha,
                    fingerprint=fp,
                    archs=tuple(a for a in args.archs.split(",") if a),
                    cuda=args.cuda,
                    torch=args.torch,
                    python_tag=py_tag,
                    definition="tools/repack_wheel.py",
                    source_sha256=got,
                ),
            )
            doc["record"] = str(args.record)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
