#!/bin/bash
# Issue 27 on an H200 host with no network: the drafter pipeline with its data-size curve
# (1k, 4k, 16k and the default 20k samples), then every drafter of the curve served at k=3, one
# and eight streams, on held-out ShareGPT chat traffic (chat template, answers end at EOS) and on
# the story's five prompts (raw, 512 tokens, EOS ignored).
# The kit, here (network): specrig kit --recipe hopper-sm90 --engine vllm --split-mb 48 --out .gpu/KIT
#   (8 volumes); give each its own folder, .gpu/K1 ... .gpu/K8, so each call carries one.
# Then calls back to back (the machine goes 30 s after a call ends, and the detached job with it):
#   bash drafter-lease.sh take           move what a call carried (.gpu/K*/vol-*) into ~/KIT
#   bash drafter-lease.sh start          install the kit (once) and start the job detached
#   bash drafter-lease.sh wait SECS      the job's progress after at most SECS, what it has so far
#                                        into $OUT; exit 0 once the job ended
#   bash drafter-lease.sh data [SECS]    (once the drafter stage ended, waiting up to SECS) the generated
#                                        data (prompts, the target's answers) and the full drafter, xz parts
#                                        of < 16 MB into $OUT, for a later lease
# A later lease also carries, in more folders `take` moves: .gpu/SB*/ the reference's environment
# (`specrig bundle --recipe hopper-sm90 --env speculators --split-mb 48 --out .gpu/SB`, 75 MB in two
# volumes: .gpu/SB1/vol-001, and .gpu/SB2/ with vol-002 and bundle.toml) and .gpu/D*/ an earlier lease's data parts; `start`
# makes the environment and puts the data in the cache before the job (its answers are not redone).
# The job reads: SAMPLES (the pipeline's training samples, default the recipe's 20,000), CURVE
# (sizes, '' for none; CURVE_LAST=1 trains it after the benches, offline only, so a short lease
# keeps the pipeline's drafter online first), FLAGS (more flags for the pipeline's own run, e.g. '--batch-tokens 8192': its
# drafter is @eagle3-trained, the one DRAFTERS names), REF (the reference trainer: speculators, the default,
# or specforge; its bundle in .gpu/SB* is made with --env REF), REF_SET (SpecForge's own settings, e.g.
# 'training.attention_backend=sdpa training.learning_rate=2e-4', each passed as --reference-set), REF_STEPS (the reference's steps, unset for no
# reference; auto: as many as fill specrig's training time on the same samples; 0: speculators' dry run), REF_SAMPLES (the reference's samples,
# default all), VARIANTS (flag sets separated by ';', each specrig's trainer again on the same data with
# those flags, e.g. '--loss-on answer;--loss-on answer --norms eagle3.1 --optimizer muon', each drafter
# added to the benches; LOSS_ON=answer is short for one more, '--loss-on answer'), DRAFTERS (what the
# benches serve, default @curve; '' for none but the variants' and the reference, which are added), K (the
# benches' draft lengths, 3), PROMPTS (chat prompts, 40), REPEAT (each configuration measured N times,
# interleaved, on servers of their own: the speedup gets an interval; 1), CHAT (0: no chat bench),
# STORY (1: also the story bench). Set them on `start`:
# `SAMPLES=4000 CURVE= LOSS_ON=answer REF_STEPS=auto DRAFTERS=@eagle3-trained bash drafter-lease.sh start`.
# A reference that fails is reported (JOB reference failed) and the benches serve the rest.
# Measured 2026-12-04: the pipeline 16.7 min from nothing (generation 608 s; 51 s converting the GGUF
# first), the chat bench 5.1 min. Second lease, SAMPLES=4000: the pipeline 6.5 min (generation 141 s
# with --stream-interval 16, server start included; training 105 s), the reference's data 165 s, its
# 100-step calibration 148 s, its run 173 s, a chat bench of one drafter 3.7 min.
# 2026-12-05: the machine's start 4.5 min of device time, a take 4 s, the install 29 s; at SAMPLES=4000 the
# pipeline 396 s, a variant 150-160 s, the reference with REF_STEPS=1364 630 s (113 s compiling first).
# Fourth lease, SAMPLES=4000 FLAGS='--batch-tokens 8192': the pipeline 572 s (GGUF 55 s, server start
# 142 s, answers 49 s, training 185 s at the 150 s cap), a chat bench of one drafter at 1 and 8 streams 211 s.
# Fifth lease, CURVE=1000,4000,16000 CURVE_LAST=1 PROMPTS=24: the machine up in 88 s, the pipeline at
# 20,000 samples 703 s (generation 339 s with the server's start, training 188 s), the chat bench
# 188 s, the curve 544 s: 1,435 s in all (tests/fixtures/h200-curve).
# Sixth lease (an H100 came for the H200), CURVE=1000,4000 PROMPTS=24: the pipeline and the curve 999 s,
# a chat bench of three drafters 215 s (four servers started together in 110 s): 1,214 s in all
# (tests/fixtures/h100-curve-online). One repeat's speedup moved by 0.2x between two drafters of one
# architecture: REPEAT=3 where a speedup decides something (three times the servers and measurements).
# Seventh lease (H200), SAMPLES=4000 CURVE= REF=specforge REF_STEPS=auto DRAFTERS=@eagle3-trained PROMPTS=24
# REPEAT=2: the machine up in 118 s, the pipeline 436 s, SpecForge 455 s (features 153 s, calibration 102 s,
# its run 131 s), a chat bench of two drafters, two repeats, 282 s: 1,173 s (tests/fixtures/h200-specforge).
# Eighth lease (an H100 came), CURVE= VARIANTS='--length-bucket 64;--train-seconds 300' DRAFTERS=@eagle3-trained
# CHAT=0: the machine up in 59 s, the pipeline at 20,000 samples 639 s (150 s of training then), the
# bucketed variant 247 s, the 300 s one 388 s: 1,274 s; a chat bench of one drafter 192 s
# (tests/fixtures/h100-train-budget). The recipe trains 300 s since: the pipeline about 780 s.
set -u
R=$HOME/RIG; C=$HOME/.cache/specrig; J=$HOME/job; D=$C/drafters/hopper-sm90
H=(--recipe hopper-sm90)
current() {  # the drafter the last pipeline run registered (@eagle3-trained), as a path
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["drafter"])' "$D/current.json"
}
collect() {
    [ -n "${OUT:-}" ] || return 0
    (cd "$C" && tar czf "$OUT/drafter-h200.tgz" --exclude='*.safetensors' --exclude='*.jsonl' \
        --exclude='heldout' --exclude='*.pt' --exclude='*.ckpt' --exclude='*.npy' --exclude='*.arrow' drafters 2>/dev/null)
    (cd "$J" && tar czf "$OUT/bench-h200.tgz" --exclude='*.prom' --exclude='profiles' \
        job.log $(ls -d chat story 2>/dev/null) 2>/dev/null)
}
case "${1:-}" in
take)
    mkdir -p "$HOME/KIT" "$HOME/SB" "$HOME/D"
    mv .gpu/K*/vol-* "$HOME/KIT/" 2>/dev/null
    mv .gpu/SB*/vol-* .gpu/SB*/bundle.toml "$HOME/SB/" 2>/dev/null
    mv .gpu/D*/data-h200.tar.xz.* "$HOME/D/" 2>/dev/null
    ls "$HOME/KIT" "$HOME/SB" "$HOME/D"
    ;;
start)
    nproc; free -g | head -2; df -h "$HOME" | tail -1
    if [ ! -x "$R/specrig" ]; then
        python3 "$HOME/KIT/vol-001/install.py" --into "$R" > "$HOME/install.log" 2>&1 || { tail -30 "$HOME/install.log"; exit 1; }
    fi
    tail -3 "$HOME/install.log"
    if [ -f "$HOME/SB/bundle.toml" ] && [ ! -e "$HOME/SB/.done" ]; then  # the reference's environment
        if "$R/specrig" env "${H[@]}" --env "${REF:-speculators}" --wheelhouse "$HOME/SB" --offline > "$HOME/SB/env.log" 2>&1; then
            touch "$HOME/SB/.done"; tail -2 "$HOME/SB/env.log"
        else  # the rest of the job still runs
            tail -20 "$HOME/SB/env.log"; echo "NO REFERENCE: its environment failed"; REF_STEPS=
        fi
    fi
    if ls "$HOME"/D/data-h200.tar.xz.* > /dev/null 2>&1 && [ ! -e "$HOME/D/.done" ]; then  # an earlier lease's data
        mkdir -p "$C" && cat "$HOME"/D/data-h200.tar.xz.* | xz -d | tar x -C "$C" && touch "$HOME/D/.done" || exit 1
        ls "$D/stages"
    fi
    mkdir -p "$J"
    setsid nohup bash "$(readlink -f "$0")" job > "$J/job.log" 2>&1 < /dev/null &
    sleep 20; tail -5 "$J/job.log"
    ;;
job)
    t0=$(date +%s)
    args=()
    [ -n "${SAMPLES:-}" ] && args+=(--samples "$SAMPLES")
    read -r -a own <<< "${FLAGS:-}"  # the pipeline's own run only (the variants and the reference take theirs)
    curve=(); later=()
    [ -n "${CURVE-1000,4000,16000}" ] && curve=(--curve "${CURVE-1000,4000,16000}")
    [ "${CURVE_LAST:-0}" = 1 ] && later=("${curve[@]}") && curve=()
    finish() {  # CURVE_LAST=1: the curve after the benches (its stages cached), scored offline only
        if [ ${#later[@]} -gt 0 ]; then
            if "$R/specrig" drafter "${H[@]}" "${args[@]}" "${own[@]}" "${later[@]}"; then
                echo "JOB curve done after $(($(date +%s) - t0)) s"
            else
                echo "JOB curve failed after $(($(date +%s) - t0)) s"
            fi
        fi
        echo "JOB DONE after $(($(date +%s) - t0)) s${1:-}"
    }
    "$R/specrig" drafter "${H[@]}" "${args[@]}" "${own[@]}" "${curve[@]}" || { echo "JOB FAILED drafter"; exit 1; }
    echo "JOB drafter done after $(($(date +%s) - t0)) s"
    drafters=${DRAFTERS-@curve}  # '': only the variants' drafters and the reference
    [ ${#later[@]} -gt 0 ] && [ -z "${DRAFTERS+set}" ] && drafters=@eagle3-trained  # no curve yet to serve
    variants=${VARIANTS:-}
    [ -n "${LOSS_ON:-}" ] && variants="--loss-on $LOSS_ON${variants:+;$variants}"
    [ -n "$variants" ] && drafters=${drafters//@eagle3-trained/$(current)}
    IFS=';' read -r -a sets <<< "$variants"
    for set in "${sets[@]}"; do  # specrig's trainer with other settings on the same data (cached stages)
        read -r -a flags <<< "$set"
        [ ${#flags[@]} -gt 0 ] || continue
        if "$R/specrig" drafter "${H[@]}" "${args[@]}" "${flags[@]}"; then
            drafters+=",$(current)"
            echo "JOB variant '$set' done after $(($(date +%s) - t0)) s: $(current)"
        else
            echo "JOB variant '$set' failed after $(($(date +%s) - t0)) s"
        fi
    done
    if [ -n "${REF_STEPS:-}" ]; then  # the reference on the same data (the pipeline's stages are cached)
        [ -n "${REF_SAMPLES:-}" ] && args+=(--reference-samples "$REF_SAMPLES")
        refset=()
        read -r -a sets <<< "${REF_SET:-}"
        for x in "${sets[@]}"; do refset+=(--reference-set "$x"); done
        if "$R/specrig" drafter "${H[@]}" "${args[@]}" --reference "${REF:-speculators}" --reference-steps "$REF_STEPS" "${refset[@]}"; then
            ref=$(ls -td "$D"/"${REF:-speculators}"-eagle3-* 2>/dev/null | head -1)  # the reference just trained (the newest)
            [ -n "$ref" ] && drafters+=",$ref"
            echo "JOB reference done after $(($(date +%s) - t0)) s"
        else
            echo "JOB reference failed after $(($(date +%s) - t0)) s"
        fi
    fi
    drafters=${drafters#,}
    [ -n "$drafters" ] || { finish ": no drafter to bench"; exit 0; }
    BENCH=(--spec eagle3 --drafter "$drafters" --k "${K:-3}" --concurrency 1,8 --repeat "${REPEAT:-1}")
    if [ "${CHAT:-1}" = 1 ]; then
        "$R/specrig" bench "${H[@]}" "${BENCH[@]}" --dataset sharegpt --chat --stop-at-eos --max-tokens 512 \
            --num-prompts "${PROMPTS:-40}" --results "$J/chat" || echo "JOB bench chat failed"
        echo "JOB chat bench done after $(($(date +%s) - t0)) s"
    fi
    if [ "${STORY:-0}" = 1 ]; then
        "$R/specrig" bench "${H[@]}" "${BENCH[@]}" --results "$J/story" || echo "JOB bench story failed"
    fi
    finish
    ;;
wait)
    end=$(($(date +%s) + ${2:-500}))
    while [ "$(date +%s)" -lt "$end" ] && ! grep -q "^JOB DONE\|^JOB FAILED" "$J/job.log" 2>/dev/null; do
        sleep 10
    done
    grep -a "^JOB\|specrig: [0-9]/6\|curve\|reference\|speculators ran\|done in\|speedup" "$J/job.log" | tail -30
    tail -c 1500 "$J/job.log"
    collect
    grep -q "^JOB DONE\|^JOB FAILED" "$J/job.log"
    ;;
data)
    [ -n "${OUT:-}" ] || { echo "data: \$OUT is not set"; exit 2; }
    end=$(($(date +%s) + ${2:-0}))  # first wait up to SECS for the drafter stage to end
    while [ "$(date +%s)" -lt "$end" ] && ! grep -q "^JOB drafter done\|^JOB FAILED" "$J/job.log"; do sleep 10; done
    grep -a "^JOB" "$J/job.log"
    full=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["drafter"])' "$D/current.json")
    (cd "$C" && tar cf - drafters/hopper-sm90/stages/prompts-* drafters/hopper-sm90/stages/generate-* \
        drafters/hopper-sm90/stages/answers-*.jsonl "${full#"$C"/}" | nice -n 19 xz -T4 -6 | split -b 15000000 -d - "$OUT/data-h200.tar.xz.")
    ls -la "$OUT"
    ;;
*)
    echo "usage: $0 take | start | wait SECS | data [SECS]" >&2
    exit 2
    ;;
esac
