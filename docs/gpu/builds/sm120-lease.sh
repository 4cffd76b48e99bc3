#!/bin/bash
# Issue 26 item 4: flash-attn 2.8.3 and sglang-kernel 0.4.5 cross-built for sm_120 (the story's
# RTX PRO 6000 host) on an H200 host with no network. Nothing there can run sm_120 code: `finish`
# lists each wheel's SASS archs instead of checking it, and neither build is recorded in
# hopper-sm90's built-wheel records (its GPUs are sm_90); the wheels stay in the wheelhouse.
# The kit, here (network), and the sglang-kernel sources (the source cache's three archives, 4 MB):
#   specrig kit --recipe hopper-sm90 --engine none --build flash-attn --split-mb 55 --out .gpu/KIT
#   mkdir -p .gpu/SRC/NAME && cp ~/.cache/specrig/sources/NAME/*.tar.gz .gpu/SRC/NAME/
#     (NAME: sglang-kernel, repo-cutlass, repo-flashinfer)
# Both fit one call (54 MB): carry .gpu/KIT and .gpu/SRC, then, in calls back to back (the machine
# goes 30 s after a call ends, and a detached build with it):
#   bash sm120-lease.sh start sglang-kernel      install the kit (once), start that build detached
#   bash sm120-lease.sh wait sglang-kernel SECS  its state after at most SECS (returns when it ends)
#   bash sm120-lease.sh start flash-attn; bash sm120-lease.sh wait flash-attn SECS ...
#   bash sm120-lease.sh finish                   list SASS archs of the sm_120 wheels, copy the figures to $OUT
# One build at a time, each at its own cap. Measured on 2026-12-04 (tests/fixtures/h200-sm120):
# sglang-kernel 6 min 31 s at 9 jobs; flash-attn 53 of 73 units in 7 min 14 s at 14 jobs (about
# 10 minutes whole, projected). Both at once (--jobs 5 and 11) would have needed about 18 minutes,
# more than that lease had left; they were stopped after a minute.
set -u
R=$HOME/RIG; C=$HOME/.cache/specrig
case "${1:-}" in
start)
    name=${2:?usage: $0 start sglang-kernel|flash-attn}
    nproc; free -g | head -2
    if [ ! -x "$R/specrig" ]; then
        python3 "$HOME/KIT/vol-001/install.py" --into "$R" > "$HOME/install.log" 2>&1 || { tail "$HOME/install.log"; exit 1; }
    fi
    for n in sglang-kernel repo-cutlass repo-flashinfer; do
        mkdir -p "$R/sources/$n" && cp "${SRC:-.gpu/SRC}/$n"/*.tar.gz "$R/sources/$n/" 2>/dev/null
    done
    "$R/specrig" build "$name" --recipe hopper-sm90 --python python3 --offline --arch 120 --plan | grep -A6 "^job cap"
    "$R/specrig" build "$name" --recipe hopper-sm90 --python python3 --offline --arch 120 --detach || exit 1
    sleep 30
    "$R/specrig" build "$name" --status
    ;;
wait)
    name=${2:?usage: $0 wait NAME SECS}
    end=$(($(date +%s) + ${3:-500}))
    while [ "$(date +%s)" -lt "$end" ] && "$R/specrig" build "$name" --status 2>/dev/null | grep -q running; do
        sleep 15
    done
    "$R/specrig" build "$name" --status
    ;;
finish)
    for w in "$C"/wheelhouse/*/*+sm120.*.whl; do
        echo "== $(basename "$w") $(stat -c %s "$w") bytes sha256 $(sha256sum "$w" | cut -c1-64)"
        T=$(mktemp -d) && python3 -m zipfile -e "$w" "$T" && find "$T" -name '*.so' | sort | while read -r f; do
            "$R/venv/bin/python" -c 'import sys, collections; from specrig.build.fatbin import fatbin_entries; print(sys.argv[2], dict(collections.Counter(fatbin_entries(sys.argv[1]))))' "$f" "${f#"$T"/}"
        done
    done > "$C/build-logs/sm120-sass.txt" 2>&1
    cat "$C/build-logs/sm120-sass.txt"
    tar czf "${OUT:-$HOME}/sm120-h200.tgz" -C "$C" build-logs $(cd "$C" && ls wheelhouse/*/manifest.json)
    ls -la "$C"/wheelhouse/*/
    ;;
*)
    echo "usage: $0 start NAME | wait NAME SECS | finish" >&2
    exit 2
    ;;
esac
