#!/bin/bash
# run-stages.sh — the body of the sbatch templates (one-node.sbatch, two-node.sbatch): inside a
# Slurm allocation, run each zerolab program once on every allocated task, one MPI rank per GPU,
# and keep every report under $RESULTS/<job id>/. The templates set the variables below; the
# defaults here are only a fallback.
#
# Each rank picks its GPU itself (kernels/gpu_select.h): by node-local rank when it sees all
# of the node's GPUs (--gpus-per-node), device 0 when the launcher binds one GPU per task
# (--gpus-per-task=1, --gpu-bind); any other binding stops the job with one line naming the counts.
set -euo pipefail
: "${SLURM_JOB_ID:?not inside a Slurm allocation: submit a template, e.g. sbatch scripts/slurm/one-node.sbatch}"

LAUNCH=${LAUNCH:-srun}                          # srun | mpirun
SRUN_MPI=${SRUN_MPI:-pmix}                      # srun --mpi=... (srun --mpi=list shows what your site has)
SRUN_FLAGS=${SRUN_FLAGS:-}                      # extra srun flags, e.g. --gpus-per-task=1 --cpu-bind=cores
MPIRUN=${MPIRUN:-mpirun}                        # the MPI the programs were built with (MPICC's)
MPIRUN_FLAGS=${MPIRUN_FLAGS:-}                  # extra mpirun flags
MPICC=${MPICC:-mpicc}
# The CUDA toolkit: CUDA_HOME where it holds nvcc, else that of the nvcc on PATH (a module's: the
# templates load their modules after setting their variables), else /usr/local/cuda.
if [ ! -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ] && nvcc_on_path=$(command -v nvcc); then
    CUDA_HOME=$(dirname "$(dirname "$nvcc_on_path")")
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PROGS=${PROGS:-stage0_ddp stage1 stage2 stage3}
FLAGS=${FLAGS:---preset lab-1b}
RESULTS=${RESULTS:-results/slurm}
BUILD=${BUILD:-yes}
BUILD_DIR=${BUILD_DIR:-build/cuda}              # build/cpu runs the same programs without GPUs (a dry run)

# grep reads the whole list: with -q it would stop at the first line, and nvidia-smi, writing
# more, could die of SIGPIPE, which pipefail reports as "no GPU"
[ "$BUILD_DIR" = build/cpu ] || nvidia-smi -L 2>/dev/null | grep '^GPU' >/dev/null ||
    { echo "run-stages: needs NVIDIA GPUs and nvidia-smi -L lists none on $(hostname); ask Slurm for GPUs (--gpus-per-node)" >&2; exit 1; }

# srun (Slurm >= 22.05) no longer inherits the job's --cpus-per-task: each rank would get one CPU,
# and --offload's host Adam one thread. Pass it on.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}; fi

ntasks=${SLURM_NTASKS:?SLURM_NTASKS is not set: give the template --ntasks-per-node}
nodes=${SLURM_JOB_NUM_NODES:-1}
per_node=$(( ntasks / nodes ))

if [ "$BUILD" = yes ]; then
    targets=()
    for prog in $PROGS; do targets+=("$BUILD_DIR/$prog"); done
    make -j "${SLURM_CPUS_ON_NODE:-4}" "${targets[@]}" MPICC="$MPICC" CUDA_HOME="$CUDA_HOME"
fi

# One rank per task: srun starts them through PMI/PMIx; mpirun reads the allocation itself.
launch() {
    case $LAUNCH in
    srun)
        # --wait=60: 60 s after the first rank ends, Slurm ends the rest — a rank killed by a
        # signal (the OOM killer, a crash inside a library) no longer leaves the others in NCCL
        # until the watchdog's --timeout (exit 5), while ranks that agreed on an exit code (2, 3,
        # 4) end within it and keep that code (--kill-on-bad-exit would kill them mid-teardown on
        # the first non-zero exit and report a signal instead)
        # shellcheck disable=SC2086 # SRUN_FLAGS is a word list on purpose
        srun --mpi="$SRUN_MPI" --wait=60 --ntasks="$ntasks" --ntasks-per-node="$per_node" $SRUN_FLAGS "$@" ;;
    mpirun)
        local map=(-ppn "$per_node")            # MPICH / Intel MPI (Hydra)
        if "$MPIRUN" --version 2>&1 | grep -qi "open mpi"; then map=(--map-by "ppr:$per_node:node" --bind-to none); fi
        # shellcheck disable=SC2086 # MPIRUN_FLAGS is a word list on purpose
        "$MPIRUN" -n "$ntasks" "${map[@]}" $MPIRUN_FLAGS "$@" ;;
    *)
        echo "run-stages: LAUNCH must be srun or mpirun, got '$LAUNCH'" >&2; return 2 ;;
    esac
}

out="$RESULTS/$SLURM_JOB_ID"
mkdir -p "$out"
{
    echo "job $SLURM_JOB_ID on ${SLURM_JOB_NODELIST:-$(hostname)}: $nodes node(s) x $per_node rank(s), launch $LAUNCH"
    echo "commit $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "flags $FLAGS"
    nvidia-smi -L 2>/dev/null || echo "no GPU listed by nvidia-smi -L"
} > "$out/job.txt"

failed=0
for prog in $PROGS; do
    name="${prog}_N${ntasks}"
    # shellcheck disable=SC2086 # FLAGS is a word list on purpose
    if launch "$BUILD_DIR/$prog" $FLAGS --json "$out/$name.json" > "$out/$name.txt" 2>&1; then rc=0; else rc=$?; failed=1; fi
    echo "$prog N=$ntasks rc=$rc $(grep -E '^summary:' "$out/$name.txt" || tail -1 "$out/$name.txt")"
done
echo "reports: $out/ (one <prog>_N$ntasks.json and .txt per program, job.txt)"
exit "$failed"
