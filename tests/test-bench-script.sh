#!/bin/bash
# test-bench-script.sh — scripts/bench-gpu.sh's own logic, on a machine without a GPU (make test):
# a pretend nvidia-smi, mpirun and torch run in a scratch copy write known times, clocks and
# power; the table must show the ratios, rank 0's clocks and the energy a step worked out here
# by hand (measured where a side read its energy counter, "~" estimated where not), "none" where a
# side read no clocks, and "failed" / "?" where a run left no numbers; the header names the ZL_
# knobs zerolab ran under and the flags it alone got (ZEROLAB_FLAGS, which every zerolab run must
# get), and a line after the table where its all-gathers ran.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-bench-script: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/repo/scripts" "$tmp/repo/build/cuda" "$tmp/repo/bench"
cp scripts/bench-gpu.sh scripts/gpu-count.sh "$tmp/repo/scripts/"
for p in stage0_ddp stage1 stage2 stage3; do printf '#!/bin/sh\nexit 1\n' > "$tmp/repo/build/cuda/$p"; done
cat > "$tmp/bin/nvidia-smi" <<'SMI'
#!/bin/bash
case "$*" in
    -L) for ((i = 0; i < 4; i++)); do echo "GPU $i: pretend"; done ;;
    *memory.total*) for ((i = 0; i < 4; i++)); do echo 143771; done ;;
esac
SMI
# zerolab, stage K at N ranks: ms = 100 + K + N, median = ms - 2, rank 0 at 1400 + 10K MHz and
# 700 W, and stage 1 read its energy counter: 69.2 + N J a step at 703 W; stage 2 at N = 4 fails and
# writes nothing but an error line.
cat > "$tmp/bin/fake-mpirun" <<'MPI'
#!/bin/bash
echo "$*" >> "${0%/bin/*}/zerolab-args" # every command line, for the ZEROLAB_FLAGS check
n=$2 prog=$3 json=; while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
k=${prog##*stage}; k=${k%%_*}
if [ "$k$n" = 24 ]; then echo "error: pretend failure"; exit 1; fi
ms=$((100 + k + n))
echo "final loss 0.04 | $ms.000 ms/step (median $((ms - 2)).000) | 1 samples/s"
echo "summary: stage=$k world=$n ms=$ms.000 tflops=500.0 loss=0.04"
energy=; [ "$k" = 1 ] && energy=", \"energy_w\": 703.0, \"energy_j\": 999.0, \"energy_steps\": 2, \"energy_j_per_step\": 69.$((2 + n))"
engine=sm_kernels; [ "$k" = 1 ] || [ "$k" = 2 ] && engine=copy_engines
echo "{\"run\": {\"allgather_engine\": \"$engine\"}, \"ranks\": [{\"clocks\": {\"readings\": 80, \"sm_mhz_median\": $((1400 + 10 * k)), \"power_w_median\": 700.0$energy}}]}" > "$json"
MPI
# the peer, stage S at N ranks: ms = 110 + S + N, median = ms - 1, 1450 MHz and 655 W, and stage 0
# read its energy counter: 72.5 J a step at 697.6 W; stage 3 read no clocks (readings 0, as where NVML is
# missing). Anything else goes to the real python3.
real=$(command -v python3)
cat > "$tmp/bin/python3" <<PY
#!/bin/bash
[ "\$1 \$2" = "-m torch.distributed.run" ] || exec "$real" "\$@"
n= s= json=; while [ \$# -gt 0 ]; do case \$1 in --nproc_per_node) n=\$2 ;; --stage) s=\$2 ;; --json) json=\$2 ;; esac; shift; done
ms=\$((110 + s + n)) r=80; [ "\$s" = 3 ] && r=0
echo "peer: stage=\$s world=\$n ms=\$ms.000 ms_median=\$((ms - 1)).000 tflops=450.0 sm_mhz=1450"
e=; [ "\$s" = 0 ] && e=", \"energy_w\": 697.6, \"energy_j\": 145.0, \"energy_steps\": 2, \"energy_j_per_step\": 72.5"
echo "{\"clocks\": {\"readings\": \$r, \"sm_mhz_median\": 1450, \"power_w_median\": 655.0\$e}}" > "\$json"
PY
chmod +x "$tmp/bin/"* "$tmp/repo/build/cuda/"*
out=$(cd "$tmp/repo" && env -u CUDA_VISIBLE_DEVICES PATH="$tmp/bin:$PATH" MPIEXEC=fake-mpirun OUT="$tmp/out" STEPS=3 \
    ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 ZL_GEMM_TABLE= ZEROLAB_FLAGS="--keep-activations --seed 7" \
    scripts/bench-gpu.sh lab-1b 2>&1) ||
    fail "exit $?: $out"
has() { grep -qF -- "$1" <<< "$out" || fail "no '$1' in: $out"; }
# the header names the knobs zerolab ran under (the table's path has its own field)
has "GEMM table: none; zerolab's knobs: ZL_NCCL_CTA_POLICY=2 ZL_NCCL_WINDOWS=1 "
# ... and the flags given to zerolab's programs only: every zerolab run got both words, no peer run
has "zerolab's flags: --keep-activations --seed 7"
[ "$(grep -c -- '--quiet --keep-activations --seed 7 --json' "$tmp/zerolab-args")" -eq 8 ] ||
    fail "ZEROLAB_FLAGS did not reach all 8 zerolab runs: $(cat "$tmp/zerolab-args")"
has "| SM MHz, zerolab / PyTorch | J a step (W by the energy counter), zerolab / PyTorch (~: estimated) |"
# stage 1, N = 2: 103 vs 113 ms (1.097×), medians 101 vs 112 (1.109×); zerolab's energy measured
# (69.4 J), the peer's estimated: 655 W × 112 ms = 73.36 J
has "| stage1 vs ZeroRedundancyOptimizer | 2 | 103.0 · 500 | 113.0 · 450 | 1.097× | 101.0 / 112.0 = 1.109× | 1410 / 1450 | 69.4 (703 W) / ~73.4 |"
# stage 0, N = 4: 104 vs 114 ms, medians 102 vs 113; zerolab's estimated, 700 W × 102 ms = 71.4 J,
# the peer's measured (72.5 J)
has "| stage0_ddp vs DDP + fp32 master | 4 | 104.0 · 500 | 114.0 · 450 | 1.096× | 102.0 / 113.0 = 1.108× | 1400 / 1450 | ~71.4 / 72.5 (698 W) |"
# stage 3: the peer read no clocks
has "| stage3 vs FSDP2 fully_shard | 2 | 105.0 · 500 | 115.0 · 450 | 1.095× | 103.0 / 114.0 = 1.107× | 1430 / none | ~72.1 / none |"
# stage 2 at N = 4: zerolab failed, so no ratio, clock or energy on its side
has "| stage2 vs FSDP1 SHARD_GRAD_OP | 4 | failed | 116.0 · 450 | n/a | n/a | ? / 1450 | ? / ~75.3 |"
[ "$(grep -c '^| stage[0-9]' <<< "$out")" -eq 8 ] || fail "want 8 rows: $out"
# where zerolab's all-gathers ran, from each run's JSON; "?" where the run left none
has "zerolab's all-gathers (run.allgather_engine): N = 2: stage0_ddp sm_kernels stage1 copy_engines stage2 copy_engines stage3 sm_kernels N = 4: stage0_ddp sm_kernels stage1 copy_engines stage2 ? stage3 sm_kernels"
echo "test-bench-script: the table's ratios, rank 0's clocks and energy a step from known runs; 'none' where a side read no clocks, 'failed' and '?' where a run left nothing; the header names the knobs; the all-gathers' engines follow the table"
