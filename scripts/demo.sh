#!/bin/sh
# demo.sh BACKEND N — run the four programs (DDP, ZeRO-1, ZeRO-2, ZeRO-3) on N ranks with
# the same model (--preset demo, or $DEMO_FLAGS) and print one comparison table.
set -eu
backend=${1:-cpu}; n=${2:-4}
if [ "$backend" = cuda ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "demo: backend cuda needs an NVIDIA GPU and nvidia-smi -L lists none; run scripts/demo.sh cpu $n instead" >&2
    exit 1
fi
flags=${DEMO_FLAGS:---preset demo}
MPIEXEC=${MPIEXEC:-mpiexec}
# shellcheck disable=SC2086 # $MPIEXEC may carry options: split on purpose
if [ "$("$(dirname "$0")/mpi-kind.sh" $MPIEXEC)" = openmpi ]; then MPIEXEC="$MPIEXEC --allow-run-as-root --oversubscribe"; fi
export NCCL_NVLS_ENABLE=0   # NVLink multicast off (harmless without NCCL)
out=build/$backend/demo
mkdir -p "$out"
: > "$out/summary.txt"
for prog in stage0_ddp stage1 stage2 stage3; do
    echo "== $prog: $MPIEXEC -n $n build/$backend/$prog $flags"
    # shellcheck disable=SC2086 # $flags and $MPIEXEC are word lists on purpose
    $MPIEXEC -n "$n" "build/$backend/$prog" $flags --json "$out/$prog.json" | tee "$out/$prog.txt" |
        grep -v '^step ' | grep -v '^summary:'
    # One job of N ranks prints one summary with world=N; a launcher that does not match the MPI
    # library starts N one-rank jobs instead (the programs refuse those, exit 2, when they can tell).
    if [ "$(grep -c "^summary: .* world=$n " "$out/$prog.txt")" != 1 ]; then
        echo "demo: '$MPIEXEC -n $n build/$backend/$prog' did not run as one job of $n ranks (above)" >&2
        exit 1
    fi
    grep '^summary:' "$out/$prog.txt" >> "$out/summary.txt"
done
echo
echo "== all four stages, N = $n, backend $backend ($flags); bytes per rank =="
awk '
function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } }
BEGIN { split("DDP ZeRO-1 ZeRO-2 ZeRO-3", names, " ")
        printf "%-7s | %14s | %14s | %14s | %14s | %14s | %6s | %10s\n", "stage", "states meas.", "states formula",
               "states paper", "peak", "wire B/step", "xDDP", "ms/step"
        print "--------+----------------+----------------+----------------+----------------+----------------+--------+-----------" }
{ s = field("stage"); w = field("wire"); if (s == 0) ddp = w
  ratio = (ddp > 0) ? sprintf("%.2f", w / ddp) : "-"
  printf "%-7s | %14s | %14s | %14.0f | %14s | %14s | %6s | %10s\n", names[s + 1], field("states_measured"),
         field("states_formula"), field("states_paper"), field("peak"), w, ratio, field("ms") }
' "$out/summary.txt"
echo "(JSON reports and full tables: $out/)"
