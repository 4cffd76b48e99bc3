#!/bin/bash
# Issue 26's sglang-kernel lease: sglang-kernel 0.4.5 built from source on a fresh H200, and SGLang
# served on the repacked published wheel and on the built one, same traffic. It ran on 2026-12-03
# (tests/fixtures/h200-sglang-kernel/complete.*, tests/fixtures/h200-sglang-serve): the build took
# 9 min 52 s at 9 jobs; but its "repacked" bench ran after the build and so served the built wheel
# too (the bench installs what the host's built-wheel record names, and the build had recorded its
# wheel). Fixed here: the repacked bench runs first, and the built wheel comes back in $OUT/job.
#
# The kit, here (network): the SGLang environment with the repacked published wheel in WH
# (docs/sglang.md "The repacked sglang-kernel"), and the build's sources (docs/builds.md
# "sglang-kernel 0.4.5 from source": git archive of the three pinned commits, --import-source):
#   nox -s kit -- --recipe hopper-sm90 --engine sglang --build sglang-kernel --split-mb 48 --wheelhouse WH --out KIT
# (6 volumes.) Carry the volumes one per call (mkdir -p ~/KIT && mv .gpu/KIT/vol-* ~/KIT/), then in
# the last call cp this file to ~/go.sh, `setsid bash ~/go.sh > ~/go.out 2>&1 < /dev/null &`, and
# poll with docs/gpu/two-engines/next-lease-poll.sh SECS "end NAME" back to back (the machine goes
# 30 s after a call). Measured on 2026-12-03: machine start 1.5 min, 6 volumes 0.5 min, install 6 s,
# build 10 min, each eagle3-random bench 3.5-5.7 min (the first start compiles SGLang's JIT kernels),
# draft_model 3.2 min: 25 min of device time in all.
set -u
KIT=${KIT:-$HOME/KIT}; J=$HOME/job; R=$HOME/RIG; S=$R/specrig
mkdir -p $J
step() { echo "=== $(date +%T) $*" >> $J/steps.log; }
run() { local name=$1; shift; step "start $name"; "$@" > $J/$name.log 2>&1; local rc=$?; step "end $name rc=$rc"; return $rc; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > $J/gpu.txt 2>&1
run install python3 $KIT/vol-001/install.py --into $R || exit 1
BENCH="bench --recipe hopper-sm90 --engine sglang --spec eagle3-random --k 2 --concurrency 1,8 --num-prompts 16 --max-tokens 128"
# 1. SGLang on the repacked published wheel (what the kit installed), before any build is recorded
run sgl-repacked $S $BENCH --results $J/sgl-repacked
# 2. the build, in the foreground of this job (the job itself is detached); its watchdog times every unit
run build $S build sglang-kernel --recipe hopper-sm90 --python python3 --offline || exit 1
cp ~/.cache/specrig/wheelhouse/*/manifest.json $J/ 2>/dev/null
cp $R/checkout/recipes/hopper-sm90.sglang.built.toml $J/built.toml 2>/dev/null
W=$(ls ~/.cache/specrig/wheelhouse/*/sglang_kernel-*.whl | head -1)
cp $W $J/   # 4 MB: comes back in the poll's job.tgz; a later kit can carry it (--wheelhouse)
run wheel bash -c "ls -l $W; sha256sum $W; python3 -m zipfile -l $W; T=\$(mktemp -d); python3 -m zipfile -e $W \$T; for f in \$T/sgl_kernel/*/*.so \$T/sgl_kernel/*.so; do echo \$f; $R/venv/bin/python -c 'import sys, collections; from specrig.build.fatbin import fatbin_entries; print(collections.Counter(fatbin_entries(sys.argv[1])))' \$f; done"
# 3. the same traffic on the built wheel (env installs what the record now names; the bench says so)
run env-built $S env --recipe hopper-sm90 --engine sglang --wheelhouse $HOME/.cache/specrig/wheelhouse --offline
E=$HOME/.cache/specrig/envs/hopper-sm90-sglang/bin/python
run which-wheel $E -c "import importlib.metadata as m, sgl_kernel, torch; print(m.version('sglang-kernel'), sgl_kernel.__file__); print(hasattr(torch.ops.sgl_kernel, 'verify_tree_greedy'), hasattr(torch.ops.sgl_kernel, 'fwd_sparse'))"
run sgl-built $S $BENCH --results $J/sgl-built
# 4. if the lease has time: real acceptance on the built wheel, the command that measured the
# repacked one on 2026-12-02 (docs/sglang.md: draft_model 93.8% accepted, 1.38x on 5 story prompts x 512)
run sgl-built-draft $S bench --recipe hopper-sm90 --engine sglang --spec draft_model --results $J/sgl-built-draft
step done
