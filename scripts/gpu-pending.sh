#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --bind-to none): split on purpose
# gpu-pending.sh OUTDIR — the GPU measurements the open issues still lack, one section each, so a
# lease can run what its device time allows: SECTIONS (default "offload peer", in that order;
# also zerocta, split, clocks, fill, verify, gpt, table2, reference, attention, gemm,
# gptstep, done on 2026-11-26 and kept for reruns), each under its own time limit (seconds, estimated on 4 GPUs
# with 64 host cores; most limits are the estimates with a margin, table2, reference, attention,
# gemm and table2-8 the estimates themselves). Each section writes
# OUTDIR/<section>/ and its log OUTDIR/<section>.log; one status line per section on stdout.
#   verify     every CUDA kernel vs the CPU, the stages bitwise equal at N = 1, 2 (MLP and GPT),
#              lab-1b stage 2 at N = 2 with and without the GEMM choice (ZL_GEMM_TUNE=0) ~190 s
#   gpt        gpt2-124m every stage at N = 1, 2, 4; gpt2-1.5b at N = 4, batch 8, 16, 32, 48
#              (issue 11: MFU >= 40 %, met on H200 at a8ed5ad: 44-48 %)             ~150 s
#   offload    lab-1b with and without --offload at 32768 and 65536 rows, and at 32768 with a
#              static loss scale (host Adam beside the backward: issue 12's overlap), the pinned
#              copies also beside a host triad and beside host Adam itself; under
#              `mpirun --bind-to none`                                                 ~350 s
#   clocks     lab-1b stage 2 at N = 2, 20 steps, with and without the GEMM choice, GPU clocks,
#              power and throttle reasons sampled every 100 ms beside it (nvidia-smi): are a
#              run's slow late steps the clocks? (issue 15's 10-step means)             ~90 s
#   zerocta    the all-gathers on the copy engines: ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 (NCCL
#              symmetric windows, zero-CTA policy) against the default, alternating, ZeRO-1..3
#              on lab-1b and the fill model at N = 2 and 4, --check; param_hash must not
#              move (issue 15: the GEMMs slowed beside NCCL's kernels)                 ~300 s
#   split      pinned copies beside host Adam (--load adam) as 1, 2 and 4 copies at once on as many
#              streams, N = 2 and 4: do more reads in flight lift the copies up under host
#              Adam's load? (issue 12: h2d at N = 2 is 69-82 % of the loaded bound)    ~60 s
#   fill       the 7.5 B "fill" MLP (D = 8192, L = 14, 1024 rows per rank), every stage at
#              N = 2 and 4 (issue 15: >= 500 TFLOP/s, ZeRO-3 >= 450; H100, and H200 without
#              DDP, 2026-11-26), then ZeRO-3 with --prefetch 2 and 3                    ~120 s
#   peer       zerolab vs its PyTorch peer per stage at N = 2, 4 (issue 15: >= 1.15x)   ~220 s
#   table2     ZeRO-3 and the --offload rows of the measured Table 2 (issue 14, 12)     ~300 s
#   reference  the PyTorch GPT reference on build/cuda, N = 1, 2 (issue 11)              ~150 s
#   attention  fused vs strided-batched attention (issue 11)                            ~60 s
#   gemm       cuBLASLt: the heuristic's first algorithm vs its timed best (issue 15)    ~60 s
#   gptstep    one GPT step's compute call by call (bench_gpt_step)                      ~30 s
# On a node of 8 GPUs (issue 16; not in the default, one section a device call):
#   scaling8   lab-1b, every stage at N = 1, 2, 4, 8 with --check: ms/step, TFLOP/s per GPU,
#              device memory, param_hash (equal across stages at N = 1, 2)              ~250 s
#   table2-8   the measured Table 2 at N = 8 (gpu-table2.sh, RANKS=8), beside zerocalc    ~590 s
#   peer8      zerolab vs its PyTorch peer per stage at N = 8 (bench-gpu.sh, NS=8)       ~250 s
#   test8      make test-gpu's kernels and integration parts, N up to 8 (MAX_WORLD=8)  ~400 s
#   test8b     its loud and report parts, N up to 8                                     ~250 s
#   test8c     its gpt and offload parts, N up to 8                                     ~450 s
#   test8d     its sanitizer, reference and benches parts                               ~350 s
#              (on 2 × H200 the four took 250, 200, 390 and 310 s at N <= 2: one call each)
# Needs `make cpu cuda` first (build/zlbatch, build/bench_host_adam, build/cuda/*); verify also
# the Criterion test binaries, build/gpu-tests/ (make build/gpu-tests/test_integration
# build/gpu-tests/test_gpt_integration where Criterion is, then copy) or build/tests/.
set -u
out=${1:?usage: gpu-pending.sh OUTDIR}
known=" table2 offload fill gpt reference attention gemm gptstep verify clocks zerocta split peer scaling8 table2-8 peer8 test8 test8b test8c test8d "
for s in ${SECTIONS:-offload peer}; do # a misspelt section must not cost a lease for nothing
    case $known in *" $s "*) ;; *) echo "gpu-pending: unknown section '$s' (known:$known)" >&2; exit 2 ;; esac
done
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-pending: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MPIEXEC=${MPIEXEC:-mpirun}
# Open MPI refuses more ranks than cores unless told; MPICH's launcher refuses the option itself.
OVERSUB=""
if [ "$("$(dirname "$0")/mpi-kind.sh" $MPIEXEC)" = openmpi ]; then OVERSUB=" --oversubscribe"; fi
gpus=$("$(dirname "$0")/gpu-count.sh") # the sections run what fits: N <= gpus (CUDA_VISIBLE_DEVICES counted)
# the 7.5 B "fill" model: 6 steps (step 1 warm-up), no final hash (an FNV of 7.5 B parameters on
# one host core would take longer than the steps); a string, so `bash -c` sections see it
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
export gpus FILL
SECTIONS=${SECTIONS:-offload peer}
section() { # name limit command...
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    mkdir -p "$out/$name"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc in $((SECONDS - t0)) s (limit $limit s)"
}
# stages NAME "N..." ARGS...: every stage at each N (those the GPUs allow), one run each into
# OUTDIR/NAME/<prog>_NAME_N<n>.json|txt, with --check; one line each: exit code, ms, TFLOP/s.
stages() {
    local name=$1 ns=$2 n p f
    shift 2
    for n in $ns; do
        [ "$n" -le "$gpus" ] || continue
        for p in stage0_ddp stage1 stage2 stage3; do
            f="$out/$name/${p}_${name}_N$n"
            timeout 120 $MPIEXEC -n "$n" "build/cuda/$p" "$@" --quiet --check --json "$f.json" > "$f.txt" 2>&1
            echo "$p N=$n rc=$? $(grep -m1 '^summary:' "$f.txt" | grep -o 'ms=[0-9.]* tflops=[0-9.]*')"
        done
    done
}
# verify: kernels, stage equivalence (MLP and GPT) on build/cuda at N <= 2, the choice on and off
verify() {
    local t=build/tests f
    [ -x build/gpu-tests/test_integration ] && t=build/gpu-tests
    build/cuda/test_kernels_gpu > "$out/verify/test_kernels_gpu.txt" 2>&1
    echo "test_kernels_gpu rc=$? $(tail -1 "$out/verify/test_kernels_gpu.txt")"
    export ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MPIEXEC="$MPIEXEC$OVERSUB" ZL_MAX_WORLD=2
    $t/test_integration --filter 'equivalence/*' -j1 > "$out/verify/mlp_equivalence.txt" 2>&1
    echo "MLP equivalence rc=$? $(tail -1 "$out/verify/mlp_equivalence.txt")"
    $t/test_gpt_integration --filter 'gpt_equivalence/*' -j1 > "$out/verify/gpt_equivalence.txt" 2>&1
    echo "GPT equivalence rc=$? $(tail -1 "$out/verify/gpt_equivalence.txt")"
    for tune in 0 1 0 1; do
        f="$out/verify/lab-1b_stage2_N2_tune$tune"
        ZL_GEMM_TUNE=$tune timeout 60 $MPIEXEC -n 2 build/cuda/stage2 --preset lab-1b --quiet \
            --json "$f.json" > "$f.txt" 2>&1
        echo "lab-1b stage2 N=2 ZL_GEMM_TUNE=$tune rc=$? $(grep -m1 '^summary:' "$f.txt" | grep -o 'ms=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ')"
    done
}
# fill_prefetch: ZeRO-3 on the fill model gathering 2 and 3 units ahead (the default is 1; its
# exposed communication was 15-19 ms a step on H200), with --trace
fill_prefetch() {
    local n k f
    for n in 2 4; do
        [ "$n" -le "$gpus" ] || continue
        for k in 2 3; do
            f="$out/fill/stage3_fill_N${n}_prefetch$k"
            timeout 120 $MPIEXEC -n "$n" build/cuda/stage3 $FILL \
                --prefetch "$k" --quiet --check --json "$f.json" --trace "$f.trace.json" > "$f.txt" 2>&1
            echo "stage3 N=$n --prefetch $k rc=$? $(grep -m1 '^summary:' "$f.txt" | grep -o 'ms=[0-9.]* tflops=[0-9.]*')" \
                "$(grep -m1 -o 'exposed communication [0-9.]* ms' "$f.txt")"
            gzip -f "$f.trace.json"
        done
    done
}
# fill: every stage on the fill model at N = 2 and 4, then ZeRO-3 with deeper prefetch
fill_all() { stages fill "2 4" $FILL && fill_prefetch; }
# zerocta: each run twice, default then windows + zero-CTA; one line each: ms, median, hash
zerocta() {
    local n p f mode model
    for model in lab-1b fill; do
        local shape=(--preset lab-1b)
        [ "$model" = fill ] && read -ra shape <<< "$FILL"
        for n in 2 4; do
            [ "$n" -le "$gpus" ] || continue
            for p in stage1 stage2 stage3; do
                for mode in default zerocta; do
                    f="$out/zerocta/${p}_${model}_N${n}_$mode"
                    local on=0 # through env(1), not export: not every mpiexec hands its environment on
                    [ "$mode" = zerocta ] && on=1
                    timeout 120 $MPIEXEC -n "$n" env ZL_NCCL_WINDOWS=$on ZL_NCCL_CTA_POLICY=$((2 * on)) \
                        "build/cuda/$p" "${shape[@]}" --quiet --check --json "$f.json" > "$f.txt" 2>&1
                    echo "$p $model N=$n $mode rc=$? $(grep -m1 '^summary:' "$f.txt" | grep -o 'ms=[0-9.]*\|hash=[0-9a-fnoe]*' | tr '\n' ' ')" \
                        "$(grep -m1 -o '(median [0-9.]*)' "$f.txt")"
                done
            done
        done
    done
    # NCCL's own word on the path it took (does zero-CTA reach the copy engines here?)
    timeout 60 $MPIEXEC -n 2 env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NCCL_DEBUG=INFO \
        NCCL_DEBUG_SUBSYS=INIT,COLL,REG build/cuda/stage3 --preset lab-1b --steps 2 --quiet \
        > "$out/zerocta/nccl_debug_stage3_N2.txt" 2>&1
    echo "NCCL_DEBUG run rc=$? ($(grep -ci 'symmetric\|copy engine\|CE ' "$out/zerocta/nccl_debug_stage3_N2.txt") lines on symmetric/CE)"
}
# split: the loaded copies as 1, 2, 4 copies at once (bench_pinned_copy --split)
split_copies() {
    local n k f
    for n in 2 4; do
        [ "$n" -le "$gpus" ] || continue
        for k in 1 2 4; do
            f="$out/split/pinned_adam_N${n}_split$k.txt"
            timeout 120 $MPIEXEC -n "$n" build/cuda/bench_pinned_copy --load-threads $(($(nproc) / n)) --load adam \
                --split "$k" > "$f" 2>&1
            echo "N=$n split=$k rc=$? $(grep -E '^node' "$f")" \
                "loaded h2d per rank: $(grep -o 'loaded_h2d=[0-9.]*' "$f" | cut -d= -f2 | tr '\n' ' ')"
        done
    done
}
# clocks: step times beside the GPUs' clocks (nvidia-smi's CSV, one line per GPU per 100 ms)
clocks() {
    local tune f smi reasons=clocks_throttle_reasons.active # renamed clocks_event_reasons in newer drivers
    nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_event_reasons.active
    for tune in 0 1 0 1; do
        f="$out/clocks/lab-1b_stage2_N2_tune${tune}_$SECONDS"
        nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
            --format=csv,nounits -lms 100 > "$f.clocks.csv" 2>&1 &
        smi=$!
        ZL_GEMM_TUNE=$tune timeout 60 $MPIEXEC -n 2 build/cuda/stage2 --preset lab-1b --steps 20 --quiet \
            --json "$f.json" > "$f.txt" 2>&1
        local rc=$?
        kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
        echo "lab-1b stage2 N=2 20 steps ZL_GEMM_TUNE=$tune rc=$rc $(grep -m1 '^summary:' "$f.txt" | grep -o 'ms=[0-9.]*')"
    done
}
export -f stages verify clocks fill_prefetch fill_all split_copies zerocta
export out
for s in $SECTIONS; do
    case $s in
    table2) CONFIGS="stage3 stage3+offload stage2+offload" section table2 300 scripts/gpu-table2.sh "$out/table2" ;;
    offload) MPIEXEC="${OFFLOAD_MPIEXEC:-mpirun --bind-to none}" ROWS="32768 65536" section offload 480 scripts/gpu-offload.sh "$out/offload" ;;
    fill) section fill 300 bash -c fill_all ;;
    gpt) section gpt 280 scripts/gpu-gpt.sh "$out/gpt" ;;
    reference) ZL_MPIEXEC="$MPIEXEC$OVERSUB" section reference 150 tests/gpu/gpt-reference.sh build/cuda 2 ;;
    attention) section attention 60 build/cuda/bench_attention ;;
    gemm) section gemm 60 build/cuda/bench_gemm_tune ;;
    gptstep) section gptstep 60 build/cuda/bench_gpt_step ;;
    verify) section verify 240 bash -c verify ;;
    clocks) section clocks 150 bash -c clocks ;;
    zerocta) section zerocta 420 bash -c zerocta ;;
    split) MPIEXEC="${OFFLOAD_MPIEXEC:-mpirun --bind-to none}" section split 120 bash -c split_copies ;;
    peer) OUT="$out/peer" section peer 290 scripts/bench-gpu.sh lab-1b ;;
    scaling8) section scaling8 300 bash -c 'stages scaling8 "1 2 4 8" --preset lab-1b' ;;
    table2-8) RANKS=8 CONFIGS="stage0_ddp stage1 stage2 stage3" section table2-8 590 scripts/gpu-table2.sh "$out/table2-8" ;;
    peer8) NS=8 OUT="$out/peer8" section peer8 300 scripts/bench-gpu.sh lab-1b ;;
    test8) PARTS="kernels integration" MAX_WORLD=8 section test8 590 scripts/test-gpu.sh ;;
    test8b) PARTS="loud report" MAX_WORLD=8 section test8b 590 scripts/test-gpu.sh ;;
    test8c) PARTS="gpt offload" MAX_WORLD=8 section test8c 590 scripts/test-gpu.sh ;;
    test8d) PARTS="sanitizer reference benches" MAX_WORLD=8 section test8d 590 scripts/test-gpu.sh ;;
    *) echo "gpu-pending: unknown section '$s'" >&2 ;;
    esac
done
