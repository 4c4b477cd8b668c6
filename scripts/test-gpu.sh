#!/bin/bash
# shellcheck disable=SC2317,SC2329  # the part_* functions are called by name (part_$p): unreachable, never invoked to shellcheck
# test-gpu.sh — the GPU test suite, for a machine with NVIDIA GPUs (make test-gpu).
#   1. each CUDA kernel against the CPU reference kernel (build/cuda/test_kernels_gpu)
#   2. the integration tests (MLP and GPT, --offload, mixed precision, checkpoints among them)
#      against build/cuda for N = 1 .. min(MAX_WORLD (default 2), GPUs)
#   3. CUDA vs CPU stage0 on the tiny preset for 10 steps (inside the integration tests)
#   4. compute-sanitizer (memcheck, racecheck-free synccheck) over short runs of every stage
#   5. --model gpt against PyTorch (tests/gpu/gpt-reference.sh: step 1's loss and gradient norm
#      within 1e-3), when PYTHON (default python3) has torch; else a SKIPPED line
#   6. the benchmarks' own checks on small shapes (they exit 4 before timing on a mismatch):
#      fused attention forward and backward vs the trainer's (bench_attention, T not a multiple
#      of 64 included), cuBLASLt's candidate algorithms vs the trainer's GEMM (bench_gemm_tune)
# PARTS picks what runs (default all, in this order): kernels integration loud report gpt offload
# mixed ckpt sanitizer reference benches — e.g. PARTS="loud offload" scripts/test-gpu.sh. On one GPU
# (or MAX_WORLD=1) the parts that need 2 ranks are skipped, and said so. Each part prints
# its time; on 2 GPUs the whole suite takes more than 10 minutes, part after part.
# PARALLEL=1 runs the parts side by side (but benches, alone before them), each into its own log
# (LOGDIR, default a new /tmp directory), each announcing its end, their logs printed when all
# have ended or the suite is stopped (TERM/INT: the unfinished parts named, exit 124; in either
# mode a stopped suite ends every program its parts started, wherever they moved: the
# ZL_TEST_GPU_RUN mark below) (every part's ranks on the same GPUs; Open MPI then gets
# --bind-to none, or each job would pin its ranks to the same cores): on 2 × H200 (2026-11-27)
# with MAX_WORLD=2 the whole suite took under 5 minutes this way, its parts' own times adding up
# to 27 minutes; later that day, with twice the checkpoint tests, the ckpt part alone ran past 7
# minutes (the others within 6), and MAX_WORLD=4 on 4 × H200 past 9.
# The integration-test binary needs Criterion and cJSON; where the machine has neither,
# build it elsewhere with `make build/gpu-tests/test_integration build/gpu-tests/test_report`
# (they carry their libraries).
set -u
cd "$(dirname "$0")/.." || exit 1 # the repository root, from wherever it is called
export NCCL_NVLS_ENABLE=0
MPIEXEC=${MPIEXEC:-mpiexec}
PARALLEL=${PARALLEL:-0}
openmpi=0
# shellcheck disable=SC2086 # $MPIEXEC may carry options: split on purpose
if [ "$("$(dirname "$0")/mpi-kind.sh" $MPIEXEC)" = openmpi ]; then
    openmpi=1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    MPIEXEC="$MPIEXEC --oversubscribe"
    # Host Adam's threads need the cores, and side by side so do the other jobs' ranks: Open MPI
    # binds each rank to one core by default (the same cores for every job).
    [ "$PARALLEL" = 1 ] && MPIEXEC="$MPIEXEC --bind-to none"
fi
PARTS=${PARTS:-kernels integration loud report gpt offload mixed ckpt sanitizer reference benches}
for p in $PARTS; do # a misspelt part must not pass as "nothing failed"
    case $p in kernels | integration | loud | report | gpt | offload | mixed | ckpt | sanitizer | reference | benches) ;;
    *) echo "test-gpu: unknown part '$p' in PARTS" >&2; exit 2 ;; esac
done
gpus=$(scripts/gpu-count.sh) # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
[ "$gpus" -gt 0 ] || { echo "test-gpu: needs an NVIDIA GPU and nvidia-smi -L lists none; make test runs the CPU suite" >&2; exit 1; }
maxw=${MAX_WORLD:-2} # ranks the integration tests go up to (MAX_WORLD=8 on an 8-GPU node)
maxw=$(( gpus < maxw ? gpus : maxw ))
# Parts whose tests launch 2 or more ranks, one GPU each (NCCL refuses two ranks on one GPU).
multi="integration loud report gpt offload mixed ckpt"
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
t_part=$SECONDS
step() { echo; echo "=== $*"; t_part=$SECONDS; }
took() { echo "(${1}: $((SECONDS - t_part)) s)"; }
# bin NAME: the test binary, from build/gpu-tests (libraries carried) if built there
bin() { if [ -x "build/gpu-tests/$1" ]; then echo "build/gpu-tests/$1"; else echo "build/tests/$1"; fi; }

# ---- the parts: each prints what it runs and its time, and returns non-zero on a failure ----

part_kernels() {
    step "CUDA kernels vs CPU reference"
    build/cuda/test_kernels_gpu || return 1
    took kernels
}

part_integration() {
    step "integration tests on build/cuda, N <= $maxw ($(bin test_integration))"
    ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$(bin test_integration)" -j1 || return 1
    took integration
}

part_loud() {
    step "failing loudly on build/cuda: outputs, preflight, watchdog (SIGSTOP), flags, --check ($(bin test_loud))"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$(bin test_loud)" -j1 || return 1
    took loud
}

part_report() {
    step "report schema and --trace on build/cuda, N <= $maxw ($(bin test_report))"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$(bin test_report)" -j1 || return 1
    took report
}

part_gpt() {
    step "GPT integration tests on build/cuda, N <= $maxw ($(bin test_gpt_integration))"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$(bin test_gpt_integration)" -j1 || return 1
    took gpt
}

part_offload() {
    # Host Adam's threads need the cores: Open MPI binds each rank to one core by default.
    local offmpi=$MPIEXEC
    [ "$openmpi" = 1 ] && [ "$PARALLEL" != 1 ] && offmpi="$MPIEXEC --bind-to none"
    step "--offload on build/cuda, N <= $maxw: bitwise vs device Adam, memory, transfers ($(bin test_offload))"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$offmpi" ZL_MAX_WORLD=$maxw "$(bin test_offload)" -j1 || return 1
    took offload
}

part_mixed() {
    step "mixed precision on build/cuda, N <= $maxw: injected overflows, agreement, scaling, norm, clipping, bf16 ($(bin test_mixed))"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$(bin test_mixed)" -j1 || return 1
    took mixed
}

part_ckpt() {
    step "sharded checkpoints on build/cuda, N <= $maxw: bitwise resume, reshard, kill during save, refusals ($(bin test_ckpt))"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$(bin test_ckpt)" -j1 || return 1
    took ckpt
}

part_sanitizer() {
    local fail=0 prog tool preset out rc
    step "compute-sanitizer"
    for prog in stage0_ddp stage1 stage2 stage3; do
        for tool in memcheck synccheck; do
            for preset in tiny gpt-tiny; do
                # API errors are not counted: NCCL probes cudaFuncGetAttributes for kernels not built
                # for this GPU and handles the error itself; our own API calls are all checked.
                out=$(compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 9 "build/cuda/$prog" --preset "$preset" --steps 2 --quiet 2>&1)
                rc=$?
                echo "$prog --preset $preset $tool: rc=$rc $(echo "$out" | grep -E 'ERROR SUMMARY' | tail -1)"
                [ "$rc" -eq 0 ] || { echo "$out" | tail -30; fail=1; }
            done
        done
    done
    took sanitizer
    return "$fail"
}

part_reference() {
    local py=${PYTHON:-python3}
    if "$py" -c 'import torch' 2>/dev/null; then
        step "--model gpt vs PyTorch on build/cuda, N <= $maxw (tests/gpu/gpt-reference.sh)"
        PYTHON=$py ZL_MPIEXEC="$MPIEXEC" tests/gpu/gpt-reference.sh build/cuda "$maxw" || return 1
        took reference
    else
        step "--model gpt vs PyTorch: SKIPPED — $py has no torch (PYTHON=/path/to/python with torch to run it)"
    fi
}

part_benches() {
    local fail=0 shape rc log
    log=$(mktemp /tmp/zl_bench_XXXXXX)
    step "benchmarks' checks on small shapes (bench_attention, bench_gemm_tune)"
    for shape in 2,256,128,2 3,130,128,2 1,1000,768,12; do
        build/cuda/bench_attention --shape "$shape" --iters 1 > "$log" 2>&1
        rc=$?
        echo "bench_attention --shape $shape: rc=$rc"
        [ "$rc" -eq 0 ] || { tail -20 "$log"; fail=1; }
    done
    # --sustain: every candidate alone for 0.3 s, NVML read beside: the step's sustained line, no
    # "no NVML readings", and a power figure in some row (a block whose energy counter moved fewer
    # than twice prints -1 W; 0.3 s holds about 3 moves of a 100 ms counter)
    build/cuda/bench_gemm_tune --dim 256 --rows 512 --layers 2 --algos 4 --sustain 0.3 > "$log" 2>&1
    rc=$?
    echo "bench_gemm_tune --dim 256 --rows 512 --sustain 0.3: rc=$rc"
    [ "$rc" -eq 0 ] || { tail -20 "$log"; fail=1; }
    if ! grep -q "sustained (each alone for 0.3 s" "$log" || grep -q "no NVML readings" "$log" ||
        ! grep -Eq '(^|[^-0-9])[1-9][0-9]* W \(' "$log"; then
        echo "bench_gemm_tune --sustain: no sustained step line, NVML not read, or no power figure:"
        grep -m3 "sustained\|NVML\| W (" "$log"; fail=1
    fi
    gemm_table_round_trip || fail=1
    local b out # --help: the usage on stdout and exit 0, before any GPU work
    for b in attention gemm_tune gpt_step pinned_copy; do
        if ! out=$(build/cuda/bench_"$b" --help 2>/dev/null) || [[ $out != usage:* ]]; then
            echo "bench_$b --help: no usage on stdout, or not exit 0"; fail=1
        fi
    done
    rm -f "$log"
    took benches
    return "$fail"
}

# A GEMM table from the benchmark (--table-margin -100: each GEMM's fastest same-bits candidate but
# the default, up to twice as slow as the default, so that the table is not empty) taken by the
# trainer at that shape: every entry taken on rank 0 (JSON run.gemm_table), and the parameters bit
# for bit those of a run without it. One rank: the table changes a GEMM's algorithm, not what any
# rank computes. The benchmark's output is kept where it fails.
gemm_table_round_trip() {
    local t j0 j1 out blog py=${PYTHON:-python3}
    t=$(mktemp /tmp/zl_table_XXXXXX.json); j0=$(mktemp /tmp/zl_notable_XXXXXX.json)
    j1=$(mktemp /tmp/zl_withtable_XXXXXX.json); blog=$(mktemp /tmp/zl_table_bench_XXXXXX)
    local shape=(--layers 2 --dim 1024 --batch 1024 --steps 3 --quiet)
    build/cuda/bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --sustain 0.2 --table "$t" \
        --table-margin -100 > "$blog" 2> "$blog.err" &&
        env -u ZL_GEMM_TUNE ZL_GEMM_TABLE="$t" build/cuda/stage2 "${shape[@]}" --json "$j1" > /dev/null &&
        env -u ZL_GEMM_TUNE -u ZL_GEMM_TABLE build/cuda/stage2 "${shape[@]}" --json "$j0" > /dev/null &&
        out=$("$py" - "$t" "$j0" "$j1" <<'PY'
import json, sys
t, a, b = (json.load(open(p)) for p in sys.argv[1:])
n, g = len(t["gemms"]), b["run"]["gemm_table"]
ok = n >= 1 and g["in_use"] and g["entries"] == n and g["taken"] == n and a["param_hash"] == b["param_hash"]
print(f"{'ok' if ok else 'FAILED'}: {n} table entries, in use {g['in_use']}, {g['taken']} taken; param_hash "
      f"{b['param_hash']} with, {a['param_hash']} without")
sys.exit(0 if ok else 1)
PY
)
    local rc=$?
    echo "gemm table round trip (bench_gemm_tune --table, ZL_GEMM_TABLE): rc=$rc ${out:-the benchmark or a run failed}"
    # stderr apart: stdout to a file is written in blocks, so its tail would not hold the error
    if [ "$rc" -ne 0 ]; then # its tail here, and the whole of it kept: which GEMM and candidate ran last
        tail -5 "$blog"; cat "$blog.err"
        local keep=${logs:-${TMPDIR:-/tmp}}/gemm_table_round_trip.log
        cat "$blog" "$blog.err" > "$keep" && echo "(the benchmark's whole output: $keep)"
    fi
    rm -f "$t" "$j0" "$j1" "$blog" "$blog.err"
    return "$rc"
}

# A CUDA error such as "unspecified launch failure" may be the driver's doing (an Xid: a GPU fault,
# a reset) rather than the program's: where the kernel log can be read, its Xid lines say which.
xid_lines() {
    local x
    x=$(dmesg 2>/dev/null | grep -i -E "NVRM: Xid" | tail -20) || true
    if [ -n "$x" ]; then echo "test-gpu: the kernel log's last Xid lines:"; echo "$x"
    elif dmesg > /dev/null 2>&1; then echo "test-gpu: no Xid in the kernel log"; fi
}

# ---- run them: one after the other, or side by side (PARALLEL=1) ----

skipped=""
if [ "$maxw" -lt 2 ]; then
    for p in $multi; do want "$p" && skipped="$skipped $p"; done
    if [ -n "$skipped" ]; then
        echo "test-gpu: SKIPPED:$skipped — their tests launch 2 or more ranks, one GPU each, and here N <= $maxw ($gpus GPU(s), MAX_WORLD=${MAX_WORLD:-2})"
        kept=""
        for p in $PARTS; do case " $multi " in *" $p "*) ;; *) kept="$kept $p" ;; esac; done
        PARTS=${kept# }
        [ -n "$PARTS" ] || { echo "test-gpu: every part asked for needs 2 GPUs: nothing to run" >&2; exit 2; }
    fi
fi
# zlckpt is the CPU build's (build/zlckpt): a checkpoint's files do not depend on the backend.
if want ckpt && [ ! -x build/zlckpt ]; then echo "test-gpu: the ckpt part needs build/zlckpt (make cpu)" >&2; exit 2; fi
# Every program a part starts inherits this mark, whatever process group or session it moves to:
# a stopped suite ends them by it. Criterion's test binaries put themselves in a process group of
# their own (setpgid at start-up, its workers setsid), and Open MPI's ranks leave mpirun's: on
# 4 × H200 (2026-11-27) a stopped suite's tests ran on after it, beside what came next (lab-1b
# up to 9.7 % slower than on a clean machine), until this sweep ended them — 10 processes after
# a suite stopped at 45 s.
export ZL_TEST_GPU_RUN="$$.$RANDOM"
marked() { # the PIDs of this user's processes that carry the mark (builtins only: a program
    # started here would carry it too; `read -d ''` splits /proc/PID/environ at its NULs)
    local e v
    for e in /proc/[0-9]*/environ; do
        [ -O "$e" ] || continue # another user's, or gone
        while IFS= read -r -d '' v; do
            [ "$v" = "ZL_TEST_GPU_RUN=$ZL_TEST_GPU_RUN" ] && { e=${e#/proc/}; echo "${e%/environ}"; break; }
        done 2>/dev/null < "$e"
    done
}
end_marked() { # TERM, again for what the survivors started meanwhile, then KILL
    local left sig said=0
    for sig in TERM TERM KILL; do
        mapfile -t left < <(marked)
        [ "${#left[@]}" -gt 0 ] || break
        [ "$said" = 1 ] || echo "test-gpu: ending ${#left[@]} process(es) the parts started (test binaries and MPI ranks leave the parts' process groups)"
        said=1
        kill -"$sig" "${left[@]}" 2>/dev/null
        sleep 2
    done
}
fail=0
if [ "$PARALLEL" = 1 ]; then
    logs=${LOGDIR:-$(mktemp -d /tmp/zl_test_gpu_XXXXXX)}
    mkdir -p "$logs" || exit 1
    rm -f "$logs"/*.rc
    echo "test-gpu: PARTS side by side ($PARTS; benches alone first), N <= $maxw; logs in $logs"
    t0=$SECONDS
    # Each part says when it ends, so a suite stopped from outside (timeout, Ctrl-C) still shows
    # which parts finished: on TERM/INT the finished parts' logs are printed, the rest named.
    print_parts() {
        for p in $PARTS; do
            if [ -f "$logs/$p.rc" ]; then
                cat "$logs/$p.log"
                [ "$(cat "$logs/$p.rc")" = 0 ] || { echo "test-gpu: part $p FAILED"; fail=1; }
            else
                echo "test-gpu: part $p UNFINISHED (its log so far: $logs/$p.log)"; fail=1
            fi
        done
    }
    stopped() { # each part runs in its own process group (set -m): signal each group, then
        # whatever still carries the mark (end_marked)
        trap - TERM INT
        set +m # no job notices ("[2]- Terminated ...") among the parts' logs for the groups ended here
        echo "test-gpu: stopped after $((SECONDS - t0)) s"
        for j in $(jobs -p); do kill -TERM -- "-$j" 2>/dev/null; done
        sleep 2
        for j in $(jobs -p); do kill -KILL -- "-$j" 2>/dev/null; done
        end_marked
        print_parts
        xid_lines
        echo "test-gpu: FAILURES (stopped before every part ended)"
        exit 124
    }
    trap stopped TERM INT
    # The benchmarks run alone, before the others: they time the GPU, and beside a training
    # process bench_gemm_tune's sustained loop lost its GPU channel (Xid 43, "unspecified launch
    # failure") in 2 of 3 runs on H200, never alone (results/gpu/verify-665aa25-2xH200/).
    alone=""; side=""
    for p in $PARTS; do if [ "$p" = benches ]; then alone=$p; else side="$side $p"; fi; done
    # A part's test binary and the ranks it launches must not outlive a stopped suite (they would
    # share the GPUs with whatever runs next): each part gets a process group of its own.
    set -m
    for group in "$alone" "$side"; do
        for p in $group; do
            # stdin /dev/null, as a background job gets without set -m: a part reading the terminal
            # from its own process group (MPICH's mpiexec forwards stdin) would be stopped (SIGTTIN)
            (part_"$p" > "$logs/$p.log" 2>&1; rc=$?; echo $rc > "$logs/$p.rc"
             echo "test-gpu: part $p ended after $((SECONDS - t0)) s, rc $rc") < /dev/null &
        done
        wait
    done
    set +m
    trap - TERM INT
    print_parts
else
    # One part at a time, in the background so that a TERM/INT reaches the trap at once (bash runs
    # a trap only after a foreground child ends), stdin /dev/null as for a background job anyway.
    stopped_in() {
        trap - TERM INT
        echo "test-gpu: stopped during part $1"
        kill -TERM "$2" 2>/dev/null
        end_marked
        xid_lines
        echo "test-gpu: FAILURES (stopped before every part ended)"
        exit 124
    }
    for p in $PARTS; do
        part_"$p" < /dev/null &
        trap 'stopped_in "$p" $!' TERM INT
        wait $! || { echo "test-gpu: part $p FAILED"; fail=1; }
    done
    trap - TERM INT
fi

echo
if [ $fail -eq 0 ]; then echo "test-gpu: ALL PASSED ($PARTS${skipped:+; skipped:$skipped})"
else xid_lines; echo "test-gpu: FAILURES"; fi
exit $fail
