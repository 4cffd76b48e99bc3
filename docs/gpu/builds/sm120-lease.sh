#!/bin/bash
# Issue 26 on an H200 host with no network, one build at a time, each detached and at its own cap.
#   item 4: flash-attn 2.8.3 and sglang-kernel 0.4.5 cross-built for sm_120 (the story's RTX PRO 6000
#           host; nothing on an H200 runs sm_120 code: `finish` lists each wheel's SASS archs instead).
#           A cross-build is not recorded in hopper-sm90's built-wheel record (its GPUs are sm_90).
#   item 3: sglang-kernel for sm_90, then `ops`: its kernels and the repacked published wheel's, timed
#           on the GPU (CUDA graphs) in interleaved processes, outputs compared bit for bit.
# The kit, here (network):
#   specrig kit --recipe hopper-sm90 --engine none --build flash-attn --split-mb 48 --out .gpu/KIT
#   mkdir -p .gpu/SRC/NAME && cp ~/.cache/specrig/sources/NAME/*.tar.gz .gpu/SRC/NAME/
#     (NAME: sglang-kernel, repo-cutlass, repo-flashinfer: sglang-kernel's sources, 4 MB)
#   .gpu/WH/: the repacked published sglang-kernel wheel, for `ops` (docs/sglang.md "The repacked
#     sglang-kernel"; 15 MB, so it travels in a second call: KIT and SRC fill the first)
# Then calls back to back (the machine goes 30 s after a call ends, and a detached build with it):
#   [ARCH=90|120] bash sm120-lease.sh start NAME   install the kit (once), start that build detached (ARCH: 120)
#   bash sm120-lease.sh wait NAME SECS             its state after at most SECS (and what the host has, in
#                                                  $OUT); exit 0 once it ended
#   bash sm120-lease.sh ops                        the two sm_90 sglang-kernel wheels, op by op, into $OUT
#   bash sm120-lease.sh finish                     SASS archs of every built wheel; figures and small wheels to $OUT
# Measured on 2026-12-04 (tests/fixtures/h200-sm120): sglang-kernel for sm_120 in 6 min 31 s at 9
# jobs; flash-attn for sm_120 whole in 14 min 50 s at 14 jobs, as `start flash-attn && wait flash-attn
# 490` in one call and `wait flash-attn 560 && finish` in the next, sent together. sglang-kernel for sm_90 at
# 14 jobs: 7 min 56 s (tests/fixtures/h200-sglang-kernel-ops). Both at once (--jobs 5 and 11) would have needed about 18 minutes; run one at a time.
set -u
R=$HOME/RIG; C=$HOME/.cache/specrig
# Every call brings back what the host has so far: a machine lost between calls (a gap over 30 s)
# takes its builds, wheels and logs with it. On 2026-12-04 one went with flash-attn at 61 of 73.
collect() {
    mkdir -p "${OUT:-$HOME}/wheels"
    cp "$R"/checkout/recipes/hopper-sm90.*.built.toml "$C/build-logs/" 2>/dev/null
    (cd "$C" && tar czf "${OUT:-$HOME}/builds-h200.tgz" build-logs $(ls wheelhouse/*/manifest.json 2>/dev/null))
    # wheels under 16 MiB (the device's limit per file), named without '+'
    for w in "$C"/wheelhouse/*/*.whl; do
        [ -f "$w" ] && [ "$(stat -c %s "$w")" -lt 16000000 ] && cp "$w" "${OUT:-$HOME}/wheels/$(basename "$w" | tr + _)"
    done
}
case "${1:-}" in
start)
    name=${2:?usage: $0 start sglang-kernel|flash-attn}
    arch=${ARCH:-120}
    nproc; free -g | head -2
    if [ ! -x "$R/specrig" ]; then
        python3 "$HOME/KIT/vol-001/install.py" --into "$R" > "$HOME/install.log" 2>&1 || { tail "$HOME/install.log"; exit 1; }
    fi
    for n in sglang-kernel repo-cutlass repo-flashinfer; do
        mkdir -p "$R/sources/$n" && cp "${SRC:-.gpu/SRC}/$n"/*.tar.gz "$R/sources/$n/" 2>/dev/null
    done
    "$R/specrig" build "$name" --recipe hopper-sm90 --python python3 --offline --arch "$arch" --plan | grep -A6 "^job cap"
    "$R/specrig" build "$name" --recipe hopper-sm90 --python python3 --offline --arch "$arch" --detach || exit 1
    sleep 30
    "$R/specrig" build "$name" --status
    ;;
wait)
    name=${2:?usage: $0 wait NAME SECS}
    end=$(($(date +%s) + ${3:-500}))
    while [ "$(date +%s)" -lt "$end" ] && "$R/specrig" build "$name" --status 2>/dev/null | grep -q running; do
        sleep 15
    done
    state=$("$R/specrig" build "$name" --status 2>&1)
    echo "$state"
    collect
    ! grep -q running <<< "$state"
    ;;
ops)
    # the built sm_90 wheel (the newest in the wheelhouse) against the repacked published one
    B=$(ls -t "$C"/wheelhouse/*/sglang_kernel-*+sm90.*.whl | head -1)
    A=$(ls "${WH:-.gpu/WH}"/sglang_kernel-0.4.5-0sm90-*.whl | head -1)
    [ -f "$A" ] && [ -f "$B" ] || { echo "ops needs both wheels: repacked '$A', built '$B'"; exit 1; }
    O=${OUT:-$HOME}/ops; mkdir -p "$O"; P=$(dirname "$(readlink -f "$0")")/sgl-kernel-ops.py
    python3 -m zipfile -e "$A" "$HOME/wA" && python3 -m zipfile -e "$B" "$HOME/wB" || exit 1
    sha256sum "$A" "$B" | tee "$O/wheels.txt"
    for r in 1 2 3; do
        PYTHONPATH=$HOME/wA python3 "$P" --label "repacked-$r" --out "$O" || exit 1
        PYTHONPATH=$HOME/wB python3 "$P" --label "built-$r" --out "$O" || exit 1
    done
    python3 "$P" --compare "$O" repacked built | tee "$O/compare.txt"
    ;;
finish)
    for w in "$C"/wheelhouse/*/*+sm*.whl; do
        echo "== $(basename "$w") $(stat -c %s "$w") bytes sha256 $(sha256sum "$w" | cut -c1-64)"
        T=$(mktemp -d) && python3 -m zipfile -e "$w" "$T" && find "$T" -name '*.so' | sort | while read -r f; do
            "$R/venv/bin/python" -c 'import sys, collections; from specrig.build.fatbin import fatbin_entries; print(sys.argv[2], dict(collections.Counter(fatbin_entries(sys.argv[1]))))' "$f" "${f#"$T"/}"
        done
    done > "$C/build-logs/wheels-sass.txt" 2>&1
    cat "$C/build-logs/wheels-sass.txt"
    collect
    ls -la "$C"/wheelhouse/*/ "${OUT:-$HOME}/wheels"
    ;;
*)
    echo "usage: [ARCH=90|120] $0 start NAME | wait NAME SECS | ops | finish" >&2
    exit 2
    ;;
esac
