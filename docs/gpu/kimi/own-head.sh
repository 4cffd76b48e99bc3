#!/bin/bash
# The second H200 job of issue 25 (2026-12-03, the lease's last 10 minutes): the 4-layer Kimi shape
# with the random EAGLE-3 head loading its OWN weights (draft_load_config, added after go.sh's run
# showed vLLM giving the drafter the target's dummy load format and output head). Baseline and k=1
# at one stream: the drafter's overhead with its own 8,192-wide head against the 2.51 ms measured
# with the borrowed 163,840-wide one. Carried and started as go.sh is.
set -u
KIT=${KIT:-$HOME/KIT}
J=$HOME/job; R=$HOME/RIG; S=$R/specrig
mkdir -p $J
step() { echo "=== $(date +%T) $*" >> $J/steps.log; }
run() { local name=$1; shift; step "start $name"; "$@" > $J/$name.log 2>&1; local rc=$?; step "end $name rc=$rc"; return $rc; }
run install python3 $KIT/vol-001/install.py --into $R || exit 1
run own-head $S bench --recipe hopper-sm90 --model kimi-4l --spec eagle3-random --k 1 --concurrency 1 --num-prompts 16 --max-tokens 128 --results $J/kimi-4l-own-head
step done
