"""Which GPU archs a shared library holds, read from its ``.nv_fatbin`` section
(no cuobjdump needed).

A CUDA fat binary is a run of containers, each a 16-byte header (magic
``0xBA55ED50``, version, header size, payload size) followed by entries; each
entry header gives its kind (1: PTX, 2: ELF cubin, i.e. SASS), its sizes and,
at byte 28, the SM arch number (120 for sm_120).
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

__all__ = ["FatbinEntry", "fatbin_entries", "sass_archs", "ptx_archs"]

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "sass"}


class FatbinEntry(tuple):
    """``(kind, arch)``, e.g. ``("sass", 120)``."""

    @property
    def kind(self) -> str:
        return self[0]

    @property
    def arch(self) -> int:
        return self[1]


def _section(data: bytes, name: str) -> bytes | None:
    """A section's bytes from a 64-bit little-endian ELF file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    e_shoff = struct.unpack_from("<Q", data, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(e_shnum):
        base = e_shoff + i * e_shentsize
        sh_name, _type, _flags, _addr, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", data, base)
        headers.append((sh_name, sh_offset, sh_size))
    _, str_off, str_size = headers[e_shstrndx]
    strtab = data[str_off : str_off + str_size]
    for sh_name, off, size in headers:
        end = strtab.find(b"\0", sh_name)
        if strtab[sh_name:end].decode(errors="replace") == name:
            return data[off : off + size]
    return None


def fatbin_entries(library: Path) -> list[FatbinEntry]:
    """Every (kind, arch) entry of the library's fat binaries, in order."""
    data = Path(library).read_bytes()
    sec = _section(data, ".nv_fatbin")
    if sec is None:
        return []
    out: list[FatbinEntry] = []
    pos = 0
    while pos + 16 <= len(sec):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", sec, pos)
        if magic != FATBIN_MAGIC:
            # containers are 8-byte aligned; skip padding
            pos += 8
            continue
        e, end = pos + hsize, pos + hsize + fsize
        while e + 32 <= end:
            kind, _unk, ehsize, psize = struct.unpack_from("<HHIQ", sec, e)
            arch = struct.unpack_from("<I", sec, e + 28)[0]
            out.append(FatbinEntry((KINDS.get(kind, f"kind{kind}"), arch)))
            if ehsize == 0:
                break
            e += ehsize + psize
        pos = end
    return out


def sass_archs(library: Path) -> Counter:
    """``Counter({120: 6})``: SASS (cubin) archs and how many cubins each."""
    return Counter(e.arch for e in fatbin_entries(library) if e.kind == "sass")


def ptx_archs(library: Path) -> Counter:
    return Counter(e.arch for e in fatbin_entries(library) if e.kind == "ptx")
