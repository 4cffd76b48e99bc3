#!/bin/bash
# The H200 lease's job for issue 24 items 3-5, most valuable first (the poll returns what is done). Carry KIT/vol-001..008
# (nox -s kit -- --recipe hopper-sm90 --split-mb 55 ...) to .gpu/KIT, one volume per call, back to back;
# in the last call: setsid bash docs/gpu/two-engines/next-lease-go.sh & then next-lease-poll.sh 540,
# and keep polling (the machine is given back 30 s after a call). About 23 min of device time.
# One detached job, its steps logged to $J/steps.log.
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)   # the checkout; the kit in $ROOT/.gpu/KIT
J=$HOME/job; R=$HOME/RIG; S=$R/specrig
mkdir -p $J
step() { echo "=== $(date +%T) $*" >> $J/steps.log; }
run() { local name=$1; shift; step "start $name"; "$@" > $J/$name.log 2>&1; local rc=$?; step "end $name rc=$rc"; return $rc; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > $J/gpu.txt 2>&1
run install python3 $ROOT/.gpu/KIT/vol-001/install.py --into $R || exit 1
# the launcher's own settings (SPECRIG_ROOT, UV_OFFLINE, ...), for the agreement script that runs beside it
eval "$(grep -E '^(D=|export )' $R/specrig)"
# item 5: the agreement with sglang.benchmark.serving, 8B shape (dummy weights), alone on the GPU
run agree $R/venv/bin/python $R/checkout/bench/agree_sglang.py --rounds 3 --num-prompts 8 --max-tokens 256 --concurrency 1,8 --out $J/agreement.json
# item 3: the draft-model oracle with SGLang's batch-invariant kernels (baseline and oracle both), alone on the GPU
run sgl-det $S bench --recipe hopper-sm90 --engine sglang --spec draft_model --engine-arg=--enable-deterministic-inference --results $J/sgl-det
# the drafter (the 2026-12-02 lease's command, its time budget trimmed to fit this lease)
run drafter $S drafter --recipe hopper-sm90 --samples 2500 --heldout 64 --train-seconds 70 --generate-seconds 120
CHAT="--spec eagle3 --k 2 --drafter @eagle3-trained --dataset sharegpt --stop-at-eos --max-tokens 256 --num-prompts 40 --concurrency 1,8"
# item 4: SGLang on chat traffic, EOS respected, alone on the GPU
run sgl-sharegpt $S bench --recipe hopper-sm90 --engine sglang $CHAT --results $J/sgl-sharegpt
# vLLM on the same chat traffic with this drafter (the pair of sgl-sharegpt)
run vllm-sharegpt $S bench --recipe hopper-sm90 $CHAT --results $J/vllm-sharegpt
# if time is left: why vLLM accepts less, acceptance-only runs side by side on the one GPU (memory split by hand; speed figures mean nothing here)
V="$S bench --recipe hopper-sm90 --spec eagle3 --k 1 --drafter @eagle3-trained --no-baseline --engine-arg=--gpu-memory-utilization=0.07 --engine-arg=--kv-cache-memory-bytes=3000000000"
run vllm-control $V --results $J/vllm-control &
sleep 5
run vllm-v1runner env VLLM_USE_V2_MODEL_RUNNER=0 $V --results $J/vllm-v1runner &
sleep 5
run vllm-eager $V --engine-arg=--enforce-eager --results $J/vllm-eager &
sleep 5
run vllm-noprefix $V --engine-arg=--no-enable-prefix-caching --results $J/vllm-noprefix &
wait
step done
