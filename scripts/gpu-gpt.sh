#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --oversubscribe): split on purpose
# gpu-gpt.sh OUTDIR — the GPT on GPUs (--model gpt, issue 11): gpt2-124m (T = 1024, 32 sequences
# per GPU: ~33k tokens, a step of well over 100 ms) in each of the four stages at N = 1, 2, 4, and
# gpt2-1.5b (8 sequences per GPU) in stages 1-3 at N = 4 — with --checkpoint-activations where the
# preflight says it does not fit (exit 2) — then gpt2-1.5b at the ZeRO paper's batch of 32 with
# --checkpoint-activations (docs/labs.md, lab 13). Few steps (step 1 is warm-up, not timed);
# --quiet --json. Each run writes OUTDIR/<name>.json and .txt; at the end one markdown table:
# stage, N, ms/step, tokens/s per GPU, model TFLOP/s per GPU and MFU, from each report's summary
# line (6*Psi + 12*L*T*D FLOPs per token; MFU against 989 TFLOP/s on H100/H200 SXM, "-" where the
# device's peak is unknown: PEAK=P passes --peak-tflops P).
set -u
out=${1:?usage: gpu-gpt.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-gpt: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun}
gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
peak=${PEAK:+--peak-tflops $PEAK}
rows=()
run() { # name n prog flags... -> its exit code; a row for the table when it trained
    local name=$1 n=$2 prog=$3
    shift 3
    timeout 600 $MPIEXEC -n "$n" "build/cuda/$prog" --quiet --json "$out/$name.json" $peak "$@" \
        > "$out/$name.txt" 2>&1
    local rc=$? s
    s=$(grep -E '^summary:' "$out/$name.txt")
    echo "$name rc=$rc ${s:-$(tail -1 "$out/$name.txt")}"
    [ $rc -eq 0 ] && rows+=("| $name | $prog | $n | $(field ms "$s") | $(field tokens_s "$s") | $(field model_tflops "$s") | $(pct "$(field mfu "$s")") |")
    return $rc
}
field() { echo "$2" | grep -oE "(^| )$1=[^ ]+" | cut -d= -f2; }
pct() { case $1 in nan|'') echo - ;; *) awk -v m="$1" 'BEGIN { printf "%.1f%%", 100 * m }' ;; esac; }

for n in 1 2 4; do
    [ "$n" -le "$gpus" ] || continue
    for p in stage0_ddp stage1 stage2 stage3; do
        run "${p}_gpt2-124m_N$n" "$n" $p --preset gpt2-124m --batch 32 --steps 6
    done
done
if [ "$gpus" -ge 4 ]; then
    for p in stage1 stage2 stage3; do
        run "${p}_gpt2-1.5b_N4" 4 $p --preset gpt2-1.5b --batch 8 --steps 4
        [ $? -eq 2 ] && run "${p}_gpt2-1.5b_ckpt-act_N4" 4 $p --preset gpt2-1.5b --batch 8 --steps 4 --checkpoint-activations
    done
    # the ZeRO paper's GPT-2 1.5B example, batch 32 at T = 1K: ~60 GB of activations, ~8 GB checkpointed
    run stage3_gpt2-1.5b_B32_ckpt-act_N4 4 stage3 --preset gpt2-1.5b --batch 32 --steps 3 --checkpoint-activations
    run stage3_gpt2-1.5b_B32_N4 4 stage3 --preset gpt2-1.5b --batch 32 --steps 3 # fused attention: fits (strided: exit 2)
    # MFU at larger batches (the fused attention keeps no P): ZeRO-1, the fastest at batch 32;
    # batch 16 fits an 80 GB H100 (peak ~50 GB), 32 and 48 only the H200 (exit 2 elsewhere)
    run stage1_gpt2-1.5b_B16_N4 4 stage1 --preset gpt2-1.5b --batch 16 --steps 3
    run stage1_gpt2-1.5b_B32_N4 4 stage1 --preset gpt2-1.5b --batch 32 --steps 3
    run stage1_gpt2-1.5b_B48_N4 4 stage1 --preset gpt2-1.5b --batch 48 --steps 3
fi

echo
echo "| run | stage | N | ms/step | tokens/s per GPU | model TFLOP/s per GPU | MFU |"
echo "|---|---|---|---|---|---|---|"
printf "%s\n" ${rows[@]+"${rows[@]}"}
echo
echo "model FLOPs per token 6*Psi + 12*L*T*D (PaLM's convention; checkpointing's recompute not counted);"
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | paste -sd ';')"
