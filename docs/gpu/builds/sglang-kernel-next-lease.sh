#!/bin/bash
# Issue 26's next lease (NOT RUN YET; written 2026-12-03 from what ran that day): sglang-kernel 0.4.5
# built from source on a fresh H200, then SGLang served on it and on the repacked published wheel,
# same traffic, back to back. What ran that day: this build's first 2.5 minutes (26/53 units at 14
# jobs; tests/fixtures/h200-sglang-kernel) and flash-attn's whole build (flash-attn-lease.sh).
#
# The kit, here (network): the SGLang environment with the repacked published wheel in WH
# (docs/sglang.md "The repacked sglang-kernel"), and the build's sources (docs/builds.md
# "sglang-kernel 0.4.5 from source": git archive of the three pinned commits, --import-source):
#   nox -s kit -- --recipe hopper-sm90 --engine sglang --build sglang-kernel --split-mb 55 --wheelhouse WH --out KIT
# Carry the volumes one per call (mkdir -p ~/KIT && mv .gpu/KIT/vol-* ~/KIT/), then in the last call
# cp this file to ~/go.sh, `setsid bash ~/go.sh > ~/go.out 2>&1 < /dev/null &`, and poll with
# docs/gpu/two-engines/next-lease-poll.sh SECS "end NAME" back to back (the machine goes 30 s after a call).
# Expected: build 10-15 min at 9 jobs (10.5 GiB per job: the measured heaviest unit), each bench ~3 min.
set -u
KIT=${KIT:-$HOME/KIT}; J=$HOME/job; R=$HOME/RIG; S=$R/specrig
mkdir -p $J
step() { echo "=== $(date +%T) $*" >> $J/steps.log; }
run() { local name=$1; shift; step "start $name"; "$@" > $J/$name.log 2>&1; local rc=$?; step "end $name rc=$rc"; return $rc; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > $J/gpu.txt 2>&1
run install python3 $KIT/vol-001/install.py --into $R || exit 1
B="build sglang-kernel --recipe hopper-sm90 --python python3 --offline"
# 1. the build, in the foreground of this job (the job itself is detached); its watchdog times every unit
run build $S $B || exit 1
cp ~/.cache/specrig/wheelhouse/*/manifest.json $J/ 2>/dev/null
cp $R/checkout/recipes/hopper-sm90.sglang.built.toml $J/built.toml 2>/dev/null
W=$(ls ~/.cache/specrig/wheelhouse/*/sglang_kernel-*.whl | head -1)
run wheel bash -c "ls -l $W; sha256sum $W; python3 -m zipfile -l $W; T=\$(mktemp -d); python3 -m zipfile -e $W \$T; for f in \$T/sgl_kernel/*/*.so \$T/sgl_kernel/*.so; do echo \$f; $R/venv/bin/python -c 'import sys, collections; from specrig.build.fatbin import fatbin_entries; print(collections.Counter(fatbin_entries(sys.argv[1])))' \$f; done"
# 2. SGLang on the repacked published wheel (what the kit installed), then on the built one: same traffic
BENCH="bench --recipe hopper-sm90 --engine sglang --spec eagle3-random --k 2 --concurrency 1,8 --num-prompts 16 --max-tokens 128"
run sgl-repacked $S $BENCH --results $J/sgl-repacked
run env-built $S env --recipe hopper-sm90 --engine sglang --wheelhouse $HOME/.cache/specrig/wheelhouse --offline
E=$HOME/.cache/specrig/envs/hopper-sm90-sglang/bin/python
run which-wheel $E -c "import importlib.metadata as m, sgl_kernel, torch; print(m.version('sglang-kernel'), sgl_kernel.__file__); print(hasattr(torch.ops.sgl_kernel, 'verify_tree_greedy'), hasattr(torch.ops.sgl_kernel, 'fwd_sparse'))"
run sgl-built $S $BENCH --results $J/sgl-built
# 3. if the lease has time: the built wheel on 2026-12-02's run of the repacked one (docs/sglang.md:
# draft_model 93.8% accepted, 1.38x on the 5 story prompts x 512): the verify kernels with real acceptance
run sgl-built-draft $S bench --recipe hopper-sm90 --engine sglang --spec draft_model --results $J/sgl-built-draft
step done
