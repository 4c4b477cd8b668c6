#!/bin/bash
# bench-gpu.sh [PRESET] — zerolab's four programs beside their PyTorch peers (bench/torch_peer.py),
# same model, shapes and mixed precision, at N = 2 and, with 4 GPUs or more, N = 4; one table
# (means of the timed steps and their ratio, then the medians and theirs, then each side's rank-0
# median SM clock through the timed steps and its energy a step — from the GPU's energy counter
# (its mean power between its first and last move, over the timed steps: common/clocks.h) where
# the side read one that moved twice or more, else "~" median power × median step: a busy
# H100/H200 runs at its power cap, where a step's time is its energy over the power the cap allows).
# PRESET: lab-1b (D = 4096, L = 8, 8192 rows per rank; default) or fill (D = 8192, L = 14 on a
# GPU of more than 100 GB, else L = 8; 1024 rows per rank). Logs in OUT (default results/gpu/bench-PRESET).
# ZEROLAB_FLAGS: more flags for zerolab's programs only (e.g. --keep-activations, the peer's
# activation policy: PyTorch's autograd keeps x, h and gelu(h) of every block); the header names them.
# Needs build/cuda (made here if missing), mpirun and python3 with torch on the GPU machine.
set -u
cd "$(dirname "$0")/.." || exit 1
preset=${1:-lab-1b}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "bench-gpu: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# zerolab's ranks unbound, as torchrun leaves the peer's (Open MPI binds a rank to one core by
# default at N <= 2: its NCCL, NVML and main threads would share it). MPICH accepts the flag too.
MPIEXEC=${MPIEXEC:-mpirun --bind-to none}
STEPS=${STEPS:-10}
gpus=$(scripts/gpu-count.sh) # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
case $preset in
    lab-1b) shape=(--layers 8 --dim 4096 --batch 8192) ;;
    fill) if [ "$mib" -gt 100000 ]; then shape=(--layers 14 --dim 8192 --batch 1024); else shape=(--layers 8 --dim 8192 --batch 1024); fi ;;
    *) echo "bench-gpu: PRESET is lab-1b or fill, got '$preset'" >&2; exit 2 ;;
esac
# zerolab's GEMM table (common/gemm_table.h): ZL_GEMM_TABLE if set (set and empty: none), else the
# one committed for this preset and GPU, tables/PRESET-GPU.json (GPU: h100, h200, ... from
# nvidia-smi); the trainer takes it only on the GPU and cuBLASLt it was made on, and its report
# says so (run.gemm_table). It changes which cuBLASLt algorithms run; each must write the first
# answer's bits on the first call's operands (the step-1 choice's check).
gpu_kind=$(nvidia-smi -L | head -1 | grep -o 'H[0-9][0-9][0-9]' | head -1 | tr H h)
if [ -z "${ZL_GEMM_TABLE+set}" ] && [ -f "tables/$preset-$gpu_kind.json" ]; then export ZL_GEMM_TABLE=tables/$preset-$gpu_kind.json; fi
out=${OUT:-results/gpu/bench-$preset}
mkdir -p "$out"
[ -x build/cuda/stage3 ] || make cuda >/dev/null || { echo "bench-gpu: make cuda failed" >&2; exit 1; }
progs=(stage0_ddp stage1 stage2 stage3)
peers=("DDP + fp32 master" "ZeroRedundancyOptimizer" "FSDP1 SHARD_GRAD_OP" "FSDP2 fully_shard")

field() { # field NAME FILE LINE-PREFIX: NAME=value from the first line starting with LINE-PREFIX
    grep -m1 "^$3" "$2" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p"
}
cell() { # cell FILE PREFIX: "ms · TFLOP/s", or what went wrong
    local ms tf
    ms=$(field ms "$1" "$2") tf=$(field tflops "$1" "$2")
    if [ -n "$ms" ]; then printf '%.1f · %.0f' "$ms" "$tf"
    elif grep -qi 'out of memory' "$1"; then echo OOM
    else echo failed; fi
}

rank0_clock() { # rank0_clock JSON MEDIAN_MS: "MHz J" of rank 0 (zerolab: ranks[0].clocks; the peer: clocks), or "? ?";
    # J is the energy counter's figure with its mean power, "J (W)", where the side has one, else
    # ~ median power × median step
    python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); c = j["ranks"][0]["clocks"] if "ranks" in j else j["clocks"]
ms = float(sys.argv[2]) if sys.argv[2] else 0
if not c.get("readings"): print("none none")
elif "energy_j_per_step" in c: print("%.0f" % c["sm_mhz_median"], "%.1f" % c["energy_j_per_step"],
                                    "(%.0f W)" % c["energy_w"] if "energy_w" in c else "")
else: print("%.0f" % c["sm_mhz_median"], "~%.1f" % (c["power_w_median"] * ms / 1e3) if ms > 0 else "?")' "$1" "$2" 2>/dev/null ||
        echo "? ?"
}

# zerolab's other ZL_ knobs set here (README's environment variables; e.g. ZL_NCCL_WINDOWS=1
# ZL_NCCL_CTA_POLICY=2): the table holds for them, so its header names them
knobs=$(env | grep '^ZL_' | grep -v '^ZL_GEMM_TABLE=' | sort | tr '\n' ' ')
echo "bench-gpu: $preset ${shape[*]}, $STEPS steps (first is warm-up), $gpus GPU(s): $(nvidia-smi -L | head -1); GEMM table: ${ZL_GEMM_TABLE:-none}; zerolab's knobs: ${knobs:-none}; zerolab's flags: ${ZEROLAB_FLAGS:-none}"
rows=() engines=()
for n in ${NS:-2 4}; do # NS: the rank counts (NS=8 on an 8-GPU node)
    [ "$n" -le "$gpus" ] || continue
    engines+=("N = $n:")
    for s in 0 1 2 3; do
        z="$out/${progs[$s]}_N$n.txt" p="$out/peer${s}_N$n.txt"
        # shellcheck disable=SC2086 # ZEROLAB_FLAGS: words, split on purpose
        $MPIEXEC -n "$n" "build/cuda/${progs[$s]}" "${shape[@]}" --steps "$STEPS" --quiet ${ZEROLAB_FLAGS:-} \
            --json "$out/${progs[$s]}_N$n.json" > "$z" 2>&1
        python3 -m torch.distributed.run --standalone --nproc_per_node "$n" bench/torch_peer.py --stage "$s" \
            "${shape[@]}" --steps "$STEPS" --json "$out/peer${s}_N$n.json" > "$p" 2>&1
        zms=$(field ms "$z" summary:) pms=$(field ms "$p" peer:)
        # the medians of the timed steps: zerolab's final line "... ms/step (median M) ...", the peer's ms_median=
        zmed=$(grep -m1 -o '(median [0-9.]*)' "$z" | tr -d '()' | cut -d' ' -f2) pmed=$(field ms_median "$p" peer:)
        # three decimals: a ratio of 1.146 printed as 1.15× would read as the 1.15× target met
        ratio=n/a mratio=n/a
        [ -n "$zms" ] && [ -n "$pms" ] && ratio=$(awk -v z="$zms" -v p="$pms" 'BEGIN { printf "%.3f×", p / z }')
        [ -n "$zmed" ] && [ -n "$pmed" ] &&
            mratio=$(awk -v z="$zmed" -v p="$pmed" 'BEGIN { printf "%.1f / %.1f = %.3f×", z, p, p / z }')
        # rank 0's median SM clock and energy a step (measured by the energy counter, or ~ median
        # power × median step) from each side's JSON clocks: zerolab's report (common/clocks.h),
        # the peer's (bench/nvml_clocks.py)
        zclk=$(rank0_clock "$out/${progs[$s]}_N$n.json" "$zmed") pclk=$(rank0_clock "$out/peer${s}_N$n.json" "$pmed")
        zclk=${zclk% } pclk=${pclk% } # no "(W)": no trailing space
        clocks="${zclk%% *} / ${pclk%% *} | ${zclk#* } / ${pclk#* }"
        rows+=("| ${progs[$s]} vs ${peers[$s]} | $n | $(cell "$z" summary:) | $(cell "$p" peer:) | $ratio | $mratio | $clocks |")
        # where zerolab's all-gathers ran (README: ZeRO-1/2, and ZeRO-3 at N = 2, on the copy engines by
        # default where NCCL can)
        engines+=("${progs[$s]} $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["run"]["allgather_engine"])' \
            "$out/${progs[$s]}_N$n.json" 2>/dev/null || echo '?')")
    done
done
echo
echo "| stage | N | zerolab ms · TFLOP/s | PyTorch ms · TFLOP/s | ratio (PyTorch ms / zerolab ms) |" \
    "medians, zerolab / PyTorch ms = ratio | SM MHz, zerolab / PyTorch | J a step (W by the energy counter), zerolab / PyTorch (~: estimated) |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "zerolab's all-gathers (run.allgather_engine): ${engines[*]}"
