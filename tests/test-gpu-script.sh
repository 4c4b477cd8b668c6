#!/bin/bash
# test-gpu-script.sh — scripts/test-gpu.sh's own logic, on a machine without a GPU (make test):
# a pretend nvidia-smi and pretend build/cuda programs in a scratch copy. On one GPU the parts
# that launch 2 ranks are skipped and named, and a request left with nothing is exit 2; with
# PARALLEL=1 every part runs, its log is printed, and a failing part fails the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-gpu-script: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/repo/scripts" "$tmp/repo/build/cuda"
cp scripts/test-gpu.sh scripts/gpu-count.sh scripts/mpi-kind.sh "$tmp/repo/scripts/"
cat > "$tmp/bin/nvidia-smi" <<'SMI'
#!/bin/bash
for ((i = 0; i < ${FAKE_GPUS:-1}; i++)); do echo "GPU $i: pretend"; done
SMI
# The kernel log: an Xid line where FAKE_XID is set (a GPU fault the driver logged)
cat > "$tmp/bin/dmesg" <<'DMESG'
#!/bin/bash
echo "[    0.5] NVRM: loading NVIDIA UNIX Open Kernel Module"
[ -z "${FAKE_XID:-}" ] || echo "[  141.9] NVRM: Xid (PCI:0000:00:06): 43, pid=1449, name=bench_gemm_tune, channel 0x00000032"
DMESG
# The kernels' and benches' programs: write their PID to $tmp/NAME.pid and "NAME start" to
# $tmp/order, say what their stdin is, sleep FAKE_<NAME>_SLEEP seconds (default 0), write "NAME
# end" to $tmp/order, say they ran (and FAKE_<NAME>_SAYS), exit
# FAKE_<NAME>_RC (default 0). bench_gemm_tune says its sustained step line unless told otherwise.
# FAKE_<NAME>_ESCAPE=1: first start a process in a session of its own (as Open MPI's ranks leave
# their launcher's group), its PID in $tmp/NAME.escaped.
for p in test_kernels_gpu bench_attention bench_gemm_tune; do
    # shellcheck disable=SC2016 # ${!v:-0} and $$ are the pretend program's, expanded when it runs
    printf '#!/bin/bash\necho $$ > %s/%s.pid\necho "%s start" >> %s/order\nv=FAKE_%s_ESCAPE\n[ -z "${!v:-}" ] || { setsid sleep 41 & echo $! > %s/%s.escaped; }\necho "%s stdin $(readlink /proc/$$/fd/0)"\nv=FAKE_%s_SLEEP\nsleep ${!v:-0}\necho "%s end" >> %s/order\necho "%s ran"\nv=FAKE_%s_SAYS\necho "${!v:-}"\nv=FAKE_%s_RC\nexit ${!v:-0}\n' \
        "$tmp" "$p" "$p" "$tmp" "${p^^}" "$tmp" "$p" "$p" "${p^^}" "$p" "$tmp" "$p" "${p^^}" "${p^^}" > "$tmp/repo/build/cuda/$p"
done
# bench_gemm_tune --table PATH writes a table of one entry; stage2 writes a report whose
# run.gemm_table says FAKE_TABLE_USED (default 1) entries were taken, and param_hash abc, or
# FAKE_HASH_WITH with ZL_GEMM_TABLE set: the benches part's round trip must fail on either.
# shellcheck disable=SC2016 # expanded when the pretend program runs
printf '%s\n' 'for ((i = 1; i < $#; i++)); do j=$((i + 1)); [ "${!i}" != --table ] || echo "{\"gemms\": [{\"what\": \"bwd dh\"}]}" > "${!j}"; done' \
    >> "$tmp/repo/build/cuda/bench_gemm_tune"
sed -i '$!{/^exit /d}' "$tmp/repo/build/cuda/bench_gemm_tune" # its exit last, after the table
# shellcheck disable=SC2016 # expanded when the pretend program runs
echo 'v=FAKE_BENCH_GEMM_TUNE_RC; exit ${!v:-0}' >> "$tmp/repo/build/cuda/bench_gemm_tune"
# Every benchmark's --help: the usage on stdout, exit 0 — but bench_pinned_copy's on stderr, exit
# 2, with FAKE_HELP_ON_STDERR=1 (as all four did before): the benches part must fail on it.
for p in bench_attention bench_gemm_tune bench_gpt_step bench_pinned_copy; do
    [ -e "$tmp/repo/build/cuda/$p" ] || printf '#!/bin/bash\nexit 0\n' > "$tmp/repo/build/cuda/$p"
    # shellcheck disable=SC2016 # expanded when the pretend program runs
    sed -i '1a [ "${1:-}" != --help ] || { [ -z "${FAKE_HELP_ON_STDERR:-}" ] || [ "$0" = "${0%pinned_copy}" ] || { echo "usage: pretend" >&2; exit 2; }; echo "usage: pretend"; exit 0; }' \
        "$tmp/repo/build/cuda/$p"
done
# shellcheck disable=SC2016 # expanded when the pretend program runs
printf '%s\n' '#!/bin/bash' 'while [ $# -gt 0 ]; do [ "$1" != --json ] || json=$2; shift; done' \
    'if [ -n "${ZL_GEMM_TABLE:-}" ]; then' \
    '  echo "{\"param_hash\": \"${FAKE_HASH_WITH:-abc}\", \"run\": {\"gemm_table\": {\"in_use\": true, \"entries\": 1, \"taken\": ${FAKE_TABLE_USED:-1}}}}" > "$json"' \
    'else echo "{\"param_hash\": \"abc\", \"run\": {\"gemm_table\": null}}" > "$json"; fi' > "$tmp/repo/build/cuda/stage2"
export FAKE_BENCH_GEMM_TUNE_SAYS="    0* id 66 | 0.1 ms   512 W ( 3) 51.2 mJ | mean 0.1 ms
  sustained (each alone for 0.3 s, mean of 2 rounds): default 1.000 ms"
echo "what the caller's stdin holds" > "$tmp/stdin"
# The Criterion binaries of the parts that launch ranks: say which rank cap they were given; with
# FAKE_CRITERION_SLEEP=S, then leave the part's process group as Criterion does (setpgid at
# start-up; here setsid, the same PID) and sleep S seconds, PID in $tmp/test_NAME.pid.
mkdir -p "$tmp/repo/build/tests"
for t in integration loud report gpt_integration offload mixed ckpt; do
    # shellcheck disable=SC2016 # expanded when the pretend binary runs
    printf '#!/bin/bash\necho "test_%s ZL_MAX_WORLD=${ZL_MAX_WORLD:-unset}"\necho $$ > %s/test_%s.pid\n[ -z "${FAKE_CRITERION_SLEEP:-}" ] || exec setsid sleep "$FAKE_CRITERION_SLEEP"\n' \
        "$t" "$tmp" "$t" > "$tmp/repo/build/tests/test_$t"
done
printf '#!/bin/bash\n' > "$tmp/repo/build/zlckpt" # the ckpt part asks for it first
chmod +x "$tmp/bin/nvidia-smi" "$tmp/bin/dmesg" "$tmp/repo/build/cuda/"* "$tmp/repo/build/tests/"* "$tmp/repo/build/zlckpt"
run() { # run EXPECTED_RC ENV... : test-gpu.sh in the scratch copy (under `timeout $LIMIT` when
    # LIMIT is set); its output in $out
    local want=$1 rc=0; shift
    out=$(cd "$tmp/repo" && env -u CUDA_VISIBLE_DEVICES PATH="$tmp/bin:$PATH" TMPDIR="$tmp" "$@" \
        ${LIMIT:+timeout $LIMIT} scripts/test-gpu.sh 2>&1 < "$tmp/stdin") || rc=$?
    [ "$rc" -eq "$want" ] || fail "$*: exit $rc, want $want: $out"
}
has() { grep -qF -- "$1" <<< "$out" || fail "no '$1' in: $out"; }

run 0 FAKE_GPUS=1 PARTS="kernels loud benches"
has "SKIPPED: loud"; has "test_kernels_gpu ran"; has "ALL PASSED (kernels benches; skipped: loud)"
run 2 FAKE_GPUS=1 PARTS="loud ckpt"
has "nothing to run"
run 0 FAKE_GPUS=2 MAX_WORLD=1 PARTS="report kernels"
has "SKIPPED: report"
# Every part that launches ranks caps them at MAX_WORLD and the GPUs there are (the report part
# once did not, and its 3-rank test failed on a 2-GPU machine).
run 0 FAKE_GPUS=4 MAX_WORLD=3 PARTS="integration loud report gpt offload mixed ckpt"
for t in integration loud report gpt_integration offload mixed ckpt; do has "test_$t ZL_MAX_WORLD=3"; done
run 0 FAKE_GPUS=2 MAX_WORLD=8 PARTS="report"
has "test_report ZL_MAX_WORLD=2"
# nvidia-smi lists every GPU of the machine; CUDA_VISIBLE_DEVICES says which this job may use
run 0 FAKE_GPUS=8 CUDA_VISIBLE_DEVICES=2,3 MAX_WORLD=8 PARTS="report"
has "test_report ZL_MAX_WORLD=2"
run 0 FAKE_GPUS=8 CUDA_VISIBLE_DEVICES=3 PARTS="report kernels"
has "SKIPPED: report"
run 0 FAKE_GPUS=2 PARALLEL=1 PARTS="kernels benches"
# side by side, each part in a process group of its own: its stdin is /dev/null, not the caller's
# (a part reading a terminal from a background group is stopped)
has "test_kernels_gpu stdin /dev/null"
has "side by side"; has "test_kernels_gpu ran"; has "bench_gemm_tune --dim 256 --rows 512 --sustain 0.3: rc=0"; has "ALL PASSED"
# ... but the benchmarks alone, before the others start, however slow (they time the GPU, and one
# beside a training process lost its GPU channel): every benchmark ended before test_kernels_gpu began
rm -f "$tmp/order"
run 0 FAKE_GPUS=2 PARALLEL=1 FAKE_BENCH_ATTENTION_SLEEP=1 PARTS="kernels benches"
grep -q "test_kernels_gpu start" "$tmp/order" || fail "no test_kernels_gpu in the order: $(cat "$tmp/order")"
sed -n '/test_kernels_gpu start/,$p' "$tmp/order" | grep -q "^bench" && fail "a benchmark ran beside another part: $(cat "$tmp/order")"
[ "$(grep -c "^bench.* end" "$tmp/order")" -eq 5 ] || fail "want 5 benchmark runs ended: $(cat "$tmp/order")"
run 1 FAKE_GPUS=2 PARALLEL=1 FAKE_TEST_KERNELS_GPU_RC=3 PARTS="kernels benches"
has "part kernels FAILED"; has "bench_gemm_tune --dim 256 --rows 512 --sustain 0.3: rc=0"; has "test-gpu: FAILURES"
run 1 FAKE_GPUS=2 FAKE_BENCH_ATTENTION_RC=4 PARTS="benches kernels"
has "part benches FAILED"; has "test_kernels_gpu ran"; has "test-gpu: no Xid in the kernel log"
# a failure prints the kernel log's Xid lines: the driver may have faulted the program
run 1 FAKE_GPUS=2 FAKE_BENCH_ATTENTION_RC=4 FAKE_XID=1 PARTS="benches kernels"
has "test-gpu: the kernel log's last Xid lines:"; has "Xid (PCI:0000:00:06): 43, pid=1449"
# the GEMM table's round trip: the benchmark's table taken whole by stage2, with the same hash
run 0 FAKE_GPUS=1 PARTS="benches"
has "gemm table round trip (bench_gemm_tune --table, ZL_GEMM_TABLE): rc=0 ok: 1 table entries, in use True, 1 taken"
run 1 FAKE_GPUS=1 FAKE_TABLE_USED=0 PARTS="benches"
has "rc=1 FAILED: 1 table entries, in use True, 0 taken"; has "part benches FAILED"
has "(the benchmark's whole output: $tmp/gemm_table_round_trip.log)"; [ -s "$tmp/gemm_table_round_trip.log" ] || fail "the failed round trip's benchmark output was not kept"
run 1 FAKE_GPUS=1 FAKE_HASH_WITH=def PARTS="benches"
has "param_hash def with, abc without"; has "part benches FAILED"
# bench_gemm_tune --sustain must have read NVML: exit 0 without its power figures fails the part
run 1 FAKE_GPUS=1 FAKE_BENCH_GEMM_TUNE_SAYS="  (no NVML readings: NVML not loaded)" PARTS="benches"
has "bench_gemm_tune --sustain: no sustained step line, NVML not read, or no power figure"; has "part benches FAILED"
run 1 FAKE_GPUS=1 FAKE_BENCH_GEMM_TUNE_SAYS="    0* id 66 | 0.1 ms    -1 W ( 1)  -0.1 mJ
  sustained (each alone for 0.3 s, mean of 2 rounds): default 1.000 ms" PARTS="benches"
has "no power figure"; has "part benches FAILED"
run 1 FAKE_GPUS=1 FAKE_HELP_ON_STDERR=1 PARTS="benches"
has "bench_pinned_copy --help: no usage on stdout, or not exit 0"; has "part benches FAILED"
grep -q "bench_gpt_step --help: no usage" <<< "$out" && fail "bench_gpt_step's usage on stdout was not taken: $out"
# Stopped from outside before every part ended (a device call's time limit): the parts that ended
# are printed, the others named, not a silent exit (a 4-GPU run once lost every part's result so).
LIMIT=3 run 124 FAKE_GPUS=2 PARALLEL=1 FAKE_TEST_KERNELS_GPU_SLEEP=30 FAKE_XID=1 PARTS="kernels benches"
has "part benches ended after"; has "bench_gemm_tune --dim 256 --rows 512 --sustain 0.3: rc=0"
has "part kernels UNFINISHED"; has "stopped before every part ended"; has "Xid (PCI:0000:00:06): 43"
grep -q "test_kernels_gpu ran" <<< "$out" && fail "the stopped part ran to its end: $out"
# Stopped alone (timeout --foreground signals test-gpu.sh, not its children): no process of the
# unfinished part may outlive it — a test binary left running shared the GPUs with what came next.
LIMIT="--foreground 3" run 124 FAKE_GPUS=2 PARALLEL=1 FAKE_TEST_KERNELS_GPU_SLEEP=37 PARTS="kernels benches"
has "part kernels UNFINISHED"
sleep 1
pid=$(cat "$tmp/test_kernels_gpu.pid")
if kill -0 "$pid" 2> /dev/null; then pkill -P "$pid"; kill "$pid"; fail "the stopped part's program still ran"; fi
# ... nor a process it started that left the part's process group (an MPI rank)
LIMIT="--foreground 3" run 124 FAKE_GPUS=2 PARALLEL=1 FAKE_TEST_KERNELS_GPU_SLEEP=37 FAKE_TEST_KERNELS_GPU_ESCAPE=1 PARTS="kernels benches"
has "part kernels UNFINISHED"; has "test-gpu: ending 1 process(es) the parts started"
pid=$(cat "$tmp/test_kernels_gpu.escaped")
if kill -0 "$pid" 2> /dev/null; then kill "$pid"; fail "a process that left the stopped part's group still ran"; fi
# ... nor a test binary that left it itself (Criterion does), while processes without the mark, or
# with another suite's, are left alone
sleep 40 & bystander=$!
ZL_TEST_GPU_RUN=another.suite sleep 40 & other=$!
LIMIT="--foreground 3" run 124 FAKE_GPUS=2 PARALLEL=1 FAKE_CRITERION_SLEEP=38 PARTS="report"
has "part report UNFINISHED"; has "test-gpu: ending 1 process(es) the parts started"
pid=$(cat "$tmp/test_report.pid")
if kill -0 "$pid" 2> /dev/null; then kill "$pid"; fail "a test binary in a group of its own outlived the stopped suite"; fi
kill -0 "$bystander" 2> /dev/null || fail "the stop ended a process without the mark"
kill -0 "$other" 2> /dev/null || fail "the stop ended a process with another suite's mark"
kill "$bystander" "$other"
# One part at a time (no PARALLEL), stopped: the part and what it started are ended, exit 124.
LIMIT="--foreground 3" run 124 FAKE_GPUS=2 FAKE_CRITERION_SLEEP=39 PARTS="kernels report"
has "test_kernels_gpu ran"; has "test-gpu: stopped during part report"; has "test-gpu: ending 1 process(es) the parts started"
has "test-gpu: no Xid in the kernel log"
pid=$(cat "$tmp/test_report.pid")
if kill -0 "$pid" 2> /dev/null; then kill "$pid"; fail "one part at a time: the stopped part's binary still ran"; fi
echo "test-gpu-script: one GPU skips the 2-rank parts (and names them), nothing left is exit 2, every part caps its ranks at min(MAX_WORLD, GPUs), PARALLEL=1 runs and reports every part, bench_gemm_tune --sustain must read NVML, a GEMM table's round trip fails where an entry is not taken or the hash differs, each benchmark's --help prints its usage on stdout, the benchmarks run alone, a failure prints the kernel log's Xid lines, and a stopped suite (side by side: printing what ended) leaves no process it started behind, and no other"
