#!/bin/bash
# The H200 job of issue 25: Kimi-K2.5's architecture cut to 4 and 8 layers (MLA, 384 INT4 experts,
# dummy weights) served by vLLM 0.26.0 with and without EAGLE-3, then `specrig project` scales the
# measurements to 61 layers and to the story's host. Most valuable first: the poll returns what is
# done. How to carry the kit and start it: docs/gpu/two-engines/next-lease-go.sh (its header), with
# the kit of one engine: `nox -s kit -- --recipe hopper-sm90 --engine vllm --split-mb 48 ...`;
# `cp` this file to ~/go.sh, `setsid bash ~/go.sh &`, then docs/gpu/two-engines/next-lease-poll.sh.
set -u
KIT=${KIT:-$HOME/KIT}
J=$HOME/job; R=$HOME/RIG; S=$R/specrig
mkdir -p $J
step() { echo "=== $(date +%T) $*" >> $J/steps.log; }
run() { local name=$1; shift; step "start $name"; "$@" > $J/$name.log 2>&1; local rc=$?; step "end $name rc=$rc"; return $rc; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > $J/gpu.txt 2>&1
run install python3 $KIT/vol-001/install.py --into $R || exit 1
LOAD="--concurrency 1,4,16 --num-prompts 16 --max-tokens 128"
# 4 layers (1 dense + 3 MoE, ~33 GB): baseline and a random EAGLE-3 head at k = 1..3, profiled;
# two servers start at once (each with half the memory)
run kimi-4l $S bench --recipe hopper-sm90 --model kimi-4l --spec eagle3-random --k 1,2,3 $LOAD --profile --results $J/kimi-4l
# 8 layers (1 dense + 7 MoE, ~70 GB, one server at a time): the baseline gives the time a MoE layer
# adds; EAGLE-3 at k=3 checks that the drafter's time does not grow with the target's layers
run kimi-8l $S bench --recipe hopper-sm90 --model kimi-8l --spec eagle3-random --k 3 $LOAD --profile --results $J/kimi-8l
# the full model on paper: 61 layers on one GPU, and on the story's host (82.5 tok/s, 51.5% all-reduce)
run project $S project $J/kimi-4l $J/kimi-8l --out $J/projection
# No draft-model oracle here: vLLM's dummy loader fills only floating-point weights, so the INT4
# experts of the target and of its copy as a draft model are each whatever memory held: not the same
# model, and acceptance would not test the path.
step done
