#!/bin/bash
# wait up to $1 s (or until steps.log matches $2, by default the job's "done"), then copy what it has into $OUT
J=$HOME/job; end=$(( $(date +%s) + ${1:-500} )); PAT=${2:-"=== .* done"}
while [ $(date +%s) -lt $end ] && ! grep -q "$PAT" $J/steps.log 2>/dev/null; do sleep 10; done
cat $J/steps.log; echo; for f in $J/*.log; do [ "$(basename $f)" = steps.log ] && continue; echo "--- $f"; tail -n 6 $f | cut -c1-300; done
nvidia-smi --query-gpu=memory.used --format=csv; ps -eo pid,etime,args | grep -E "vllm|sglang|specrig" | grep -v grep | cut -c1-160 | head -20
mkdir -p $OUT/job && cd $J && tar czf $OUT/job/job.tgz --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' . 2>/dev/null; ls -la $OUT/job
cd $HOME/.cache/specrig 2>/dev/null && find drafters -maxdepth 4 \( -name '*.json' -o -name '*.log' \) -size -2M | tar czf $OUT/job/drafters-meta.tgz -T - 2>/dev/null; find drafters -maxdepth 3 | head -20
