#!/bin/bash
# test-slurm.sh — the Slurm templates (make test): every script parses (bash -n, sh -n) and
# passes shellcheck where it is installed; then scripts/slurm/run-stages.sh runs for real on
# the CPU build inside a pretend allocation (SLURM_* variables, an srun that hands its task
# count to mpiexec), and must leave one JSON report per program under results dir/<job id>/.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-slurm: $*" >&2; exit 1; }

for s in scripts/*.sh scripts/slurm/*.sh scripts/slurm/*.sbatch tests/*.sh; do
    case $(head -1 "$s") in *bash*) bash -n "$s" ;; *) sh -n "$s" ;; esac || fail "$s does not parse"
done
if command -v shellcheck >/dev/null 2>&1; then
    shellcheck scripts/*.sh scripts/slurm/*.sh scripts/slurm/*.sbatch tests/*.sh || fail "shellcheck"
else
    echo "test-slurm: shellcheck not installed, skipped (apt-get install shellcheck)"
fi
for t in scripts/slurm/one-node.sbatch scripts/slurm/two-node.sbatch; do
    grep -q '^#SBATCH --ntasks-per-node=' "$t" || fail "$t sets no --ntasks-per-node"
    grep -q 'exec bash scripts/slurm/run-stages.sh' "$t" || fail "$t does not run scripts/slurm/run-stages.sh"
done
# The GPU scripts refuse a misspelt part or section (exit 2) before they look for a GPU, so a
# lease is not spent on nothing.
for cmd in "PARTS='kernels integartion' scripts/test-gpu.sh" "SECTIONS='scaling8 tset8' scripts/gpu-pending.sh /tmp"; do
    rc=0; out=$(bash -c "$cmd" 2>&1) || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "unknown" <<< "$out"; then fail "$cmd: exit $rc, '$out' (want 2 and 'unknown')"; fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
cat > "$tmp/bin/srun" <<'SRUN'
#!/bin/bash
# Pretend srun: keep --ntasks, drop the other options, launch with mpiexec.
n=1
wait_s=unset
while [ $# -gt 0 ]; do case $1 in --ntasks=*) n=${1#--ntasks=}; shift ;; --wait=*) wait_s=${1#--wait=}; shift ;; --*) shift ;; *) break ;; esac; done
echo "pretend srun: SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-unset} wait=$wait_s" >&2
exec "${ZL_MPIEXEC:-mpiexec}" -n "$n" "$@"
SRUN
chmod +x "$tmp/bin/srun"
PATH="$tmp/bin:$PATH" SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_JOB_NUM_NODES=1 SLURM_CPUS_PER_TASK=4 BUILD=no BUILD_DIR=build/cpu \
    PROGS="stage0_ddp stage3" FLAGS="--preset tiny --steps 2" RESULTS="$tmp/results" \
    bash scripts/slurm/run-stages.sh > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "run-stages.sh failed"; }
for p in stage0_ddp stage3; do
    f="$tmp/results/4242/${p}_N2.json"
    [ -s "$f" ] || { cat "$tmp/log"; fail "no report $f"; }
    grep -q '"world":[[:space:]]*2[,[:space:]]' "$f" || fail "$f is not an N = 2 report"
done
[ -s "$tmp/results/4242/job.txt" ] || fail "no job.txt"
# srun >= 22.05 does not inherit the job's --cpus-per-task: run-stages.sh passes it on
grep -q "pretend srun: SRUN_CPUS_PER_TASK=4" "$tmp/results/4242/stage0_ddp_N2.txt" || fail "srun was not given the job's CPUs per task"
# a rank killed by a signal must end the others (Slurm's default may let them wait for --timeout)
grep -q "wait=60" "$tmp/results/4242/stage0_ddp_N2.txt" || fail "srun was not given --wait=60"
echo "test-slurm: templates parse$(command -v shellcheck >/dev/null && echo ' and pass shellcheck'); run-stages.sh wrote a report per program under <results>/<job id>/"
