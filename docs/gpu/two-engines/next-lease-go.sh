#!/bin/bash
# The H200 job of issue 24 item 4 (SGLang on chat traffic with a trained drafter, and vLLM on the
# same traffic with the same drafter), most valuable first: the poll returns what is done. It ran
# on 2026-12-03 (docs/sglang.md, "One drafter, two engines, on chat traffic"); keep it as the
# template of a lease job. Build the kit (nox -s kit -- --recipe hopper-sm90 --split-mb 48 ...),
# then carry .gpu/KIT/vol-00N, one volume per device call, back to back, each call moving it out of
# the checkout (`mkdir -p ~/KIT && mv .gpu/KIT/vol-* ~/KIT/`: the device tool replaces the
# checkout's carried folders on every call, so a volume left there is gone at the next one). In the
# last call: `cp` this file to ~/go.sh, `setsid bash ~/go.sh &` (a copy: the next call rewrites the
# checkout), then next-lease-poll.sh 480, and keep polling (the machine is given back 30 s after a
# call). A drafter trained elsewhere (copied to .gpu/DRAFTER/NAME) travels in a call of its own
# (the checkout plus the last volume plus 15 MB pass the 64 MiB a call carries), moved to
# ~/DRAFTER; then `DRAFTER=~/DRAFTER/NAME setsid bash ~/go.sh` skips the training stage. Drafters
# record their target's config fingerprint since 2026-12-03; one from before is refused on a host
# whose transformers wrote the config with another version stamp, as happened that day.
# Measured on 2026-12-03: the machine's start ~1.5 min of held time, 8 volumes ~1 min, install
# 5 s, the drafter 6.0 min, SGLang's pair 5.6 min, vLLM's 3.3 min, the four gap runs 2.4 min:
# 21.6 min of device time in all, 18 of them this job.
set -u
KIT=${KIT:-$HOME/KIT}   # the volumes, moved there call by call
J=$HOME/job; R=$HOME/RIG; S=$R/specrig
mkdir -p $J
step() { echo "=== $(date +%T) $*" >> $J/steps.log; }
run() { local name=$1; shift; step "start $name"; "$@" > $J/$name.log 2>&1; local rc=$?; step "end $name rc=$rc"; return $rc; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > $J/gpu.txt 2>&1
run install python3 $KIT/vol-001/install.py --into $R || exit 1
# items 3 and 5 (the deterministic oracle, the agreement) were recorded on 2026-12-03:
# tests/fixtures/h200-two-engines/sglang-oracle-deterministic.summary.json.gz, tests/fixtures/sglang/h200-0.5.17/agreement.json
# the drafter: one carried in (DRAFTER=folder, e.g. trained here by `nox -s drafter`: saves the lease
# ~5.5 min), else trained there (the 2026-12-03 lease's command took 5m50s at 2,500 samples)
if [ -n "${DRAFTER:-}" ]; then
  step "drafter carried in: $DRAFTER"; D="--drafter $DRAFTER"
else
  run drafter $S drafter --recipe hopper-sm90 --samples 2000 --heldout 48 --train-seconds 50 --generate-seconds 100
  D="--drafter @eagle3-trained"
fi
CHAT="--spec eagle3 --k 2 $D --dataset sharegpt --stop-at-eos --max-tokens 256 --num-prompts 40 --concurrency 1,8"
# item 4: SGLang on chat traffic, EOS respected, alone on the GPU
run sgl-sharegpt $S bench --recipe hopper-sm90 --engine sglang $CHAT --results $J/sgl-sharegpt
# vLLM on the same chat traffic with this drafter (the pair of sgl-sharegpt)
run vllm-sharegpt $S bench --recipe hopper-sm90 $CHAT --results $J/vllm-sharegpt
# if time is left: why vLLM accepts less, acceptance-only runs side by side on the one GPU (memory split by hand; speed figures mean nothing here)
V="$S bench --recipe hopper-sm90 --spec eagle3 --k 1 $D --no-baseline --engine-arg=--gpu-memory-utilization=0.07 --engine-arg=--kv-cache-memory-bytes=3000000000"
run vllm-control $V --results $J/vllm-control &
sleep 5
run vllm-v1runner env VLLM_USE_V2_MODEL_RUNNER=0 $V --results $J/vllm-v1runner &
sleep 5
run vllm-eager $V --engine-arg=--enforce-eager --results $J/vllm-eager &
sleep 5
run vllm-noprefix $V --engine-arg=--no-enable-prefix-caching --results $J/vllm-noprefix &
wait
step done
