"""``specrig repack``: a wheel without some of its files, byte-for-byte
reproducibly, recorded like a built wheel (its own hash; the lock's is kept)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "repack a wheel without some files (reproducibly), recorded as a built wheel"
DESCRIPTION = (
    "Repack a published wheel without some of its entries (e.g. kernels a recipe never loads), byte-for-byte "
    "reproducibly, so it fits size-limited transfers; store it in the wheelhouse and record it for the recipe."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    from specrig.builder.repack import repack_and_record

    r = repack_and_record(
        args.source,
        source_sha256=args.source_sha256,
        drop=args.drop,
        build_tag=args.build_tag,
        out_dir=args.out,
        wheelhouse=args.wheelhouse,
        record=args.record,
        archs=tuple(a for a in args.archs.split(",") if a),
        cuda=args.cuda,
        torch=args.torch,
    )
    doc = {"filename": r.wheel.name, "sha256": r.sha256, "size": r.size, "dropped": r.dropped, "inputs": r.inputs}
    if r.fingerprint:
        doc |= {"fingerprint": r.fingerprint, "stored": str(r.stored)}
    if r.record:
        doc["record"] = str(r.record)
    print(json.dumps(doc, indent=2))
    return 0
