#!/bin/bash
# flash-attn 2.8.3 for sm_90 on a fresh H200 host (no network), from the documented commands
# (docs/builds.md "flash-attn on a GPU host"). The kit was made on a machine with network:
#   specrig kit --recipe hopper-sm90 --engine none --build flash-attn --split-mb 48 --out KIT
# and carried to the host as $HOME/KIT. One step per device call:
#   bash flash-attn-lease.sh start        install the kit, print the plan, start the build detached
#   bash flash-attn-lease.sh wait SECS    the build's state after at most SECS (it returns when it ends)
#   bash flash-attn-lease.sh finish       follow it to its end, check the wheel on the GPU, copy the figures
# The cross-build for the story's SM120 host is docs/gpu/builds/sm120-lease.sh.
set -u
R=$HOME/RIG
B=(build flash-attn --recipe hopper-sm90 --python python3 --offline)
case "${1:-}" in
start)
    nproc; free -g | head -2; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
    python3 "$HOME/KIT/vol-001/install.py" --into "$R" || exit 1
    "$R/specrig" "${B[@]}" --plan || exit 1
    "$R/specrig" "${B[@]}" --detach || exit 1
    sleep 60
    "$R/specrig" build flash-attn --status
    ;;
wait)
    end=$(($(date +%s) + ${2:-500}))
    while [ "$(date +%s)" -lt "$end" ] && "$R/specrig" build flash-attn --status 2>/dev/null | grep -q running; do
        sleep 15
    done
    "$R/specrig" build flash-attn --status
    ;;
finish)
    "$R/specrig" build flash-attn --follow
    "$R/specrig" "${B[@]}" --reuse-only --check
    rc=$?
    C=$HOME/.cache/specrig
    cp "$R/checkout/recipes/hopper-sm90.vllm.built.toml" "$C/build-logs/" 2>/dev/null
    tar czf "${OUT:-$HOME}/flash-attn-h200.tgz" -C "$C" build-logs $(cd "$C" && ls wheelhouse/*/manifest.json)
    ls -la "$C"/wheelhouse/*/
    exit $rc
    ;;
*)
    echo "usage: $0 start | wait SECS | finish" >&2
    exit 2
    ;;
esac
