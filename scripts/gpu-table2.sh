#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --oversubscribe): split on purpose
# gpu-table2.sh OUTDIR — a measured "Table 2" (the ZeRO paper's: the largest model each
# configuration trains), at N ranks on one node, for the MLP at D = 8192 (1024 rows per rank),
# searching over L: DDP, ZeRO-1, ZeRO-2, ZeRO-3, and ZeRO-2/3 with --offload.
#
# The prediction is the programs' own preflight (common/preflight.c): one probe run (L = 1)
# reports what its preflight compared — free device bytes (cudaMemGetInfo after CUDA and NCCL
# start), MemAvailable, the ranks of the node — and `zerocalc --max-layers` finds the largest L
# whose every buffer (model states, activations, buffers) fits those, from the same formulas
# (zl_formula_need). Then, per configuration:
#   L       --steps 2 --check --no-param-hash (--steps 1 with --offload: host Adam bound)   must
#           train, exit 0 (no final hash: byte-wise FNV-1a runs at ~0.6-1 GB/s on one host core,
#           about a minute per 30 B parameters, likely most of the 33-81 s each measured run took);
#           if it does not (a CUDA out-of-memory the preflight let through), L - 1, L - 2 are tried
#   L + 1   --no-preflight     expected: out of memory while allocating, exit 1 (proves the bound)
#   L + 1   with the preflight expected: refused before any allocation, exit 2
# A host-bound configuration (--offload: master, m, v pinned on the host, shared by the node's
# ranks) skips the L + 1 --no-preflight run unless TABLE2_HOST_OOM=1: pinning past MemAvailable
# may wake the kernel's OOM killer on a shared machine.
# Beside it, `zerocalc --max-model` gives the paper's answer (model states only, same bytes).
#
# Files: OUTDIR/probe.json, <config>.zerocalc.json, <config>_L<l>.json and .txt (L, L-1, L-2),
# <config>_L<L+1>[_nopreflight].txt (the runs made to fail write no JSON),
# OUTDIR/table2.tsv (one row per configuration, for notebooks/06_table2) and table2.md.
# Environment: BUILD (build/cuda; build/cpu with ZL_CPU_DEVICE_BYTES for a pretend device),
# RANKS (4), DIM (8192), BATCH (1024), CONFIGS, MPIEXEC (mpirun), ZEROCALC (build/zerocalc),
# TIMEOUT (240 s a run), TIMEOUT_OFFLOAD (420 s a run), TABLE2_HOST_OOM (0).
# Estimate on 4 x H200: about 1 min per configuration without --offload (start-up ~10 s a run,
# a 35B-parameter step ~1-2 s), 1-2 min with (pinning ~120 GB per rank, one host Adam step).
set -u
out=${1:?usage: gpu-table2.sh OUTDIR}
BUILD=${BUILD:-build/cuda}
N=${RANKS:-4}
DIM=${DIM:-8192}
BATCH=${BATCH:-1024}
CONFIGS=${CONFIGS:-stage0_ddp stage1 stage2 stage3 stage2+offload stage3+offload}
MPIEXEC=${MPIEXEC:-mpirun}
ZEROCALC=${ZEROCALC:-build/zerocalc}
TIMEOUT=${TIMEOUT:-240}
TIMEOUT_OFFLOAD=${TIMEOUT_OFFLOAD:-420}
HOST_OOM=${TABLE2_HOST_OOM:-0}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

die() { echo "gpu-table2: $*" >&2; exit 1; }
backend=cuda
case $BUILD in *cpu*) backend=cpu ;; esac
if [ "$backend" = cuda ]; then
    nvidia-smi -L 2>/dev/null | grep -q '^GPU' || die "needs NVIDIA GPUs and nvidia-smi -L lists none (BUILD=build/cpu ZL_CPU_DEVICE_BYTES=... runs it on a pretend device)"
    gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
    [ "$gpus" -ge "$N" ] || die "RANKS=$N but only $gpus GPU(s)"
fi
for p in stage0_ddp stage1 stage2 stage3; do [ -x "$BUILD/$p" ] || die "$BUILD/$p not built (make)"; done
[ -x "$ZEROCALC" ] || die "$ZEROCALC not built (make)"
mkdir -p "$out" || die "cannot create $out"

# Every value of "key" in a JSON file (ours print integers, cJSON up to 17 digits), one a line.
jnums() { grep -o "\"$2\":[[:space:]]*[-0-9.eE+]*" "$1" 2>/dev/null | sed 's/.*:[[:space:]]*//'; }
jmin() { jnums "$1" "$2" | sort -g | head -1; }
jmax() { jnums "$1" "$2" | sort -g | tail -1; }
gb() { awk -v b="${1:--}" 'BEGIN { if (b == "-") print "-"; else printf "%.2f", b / 1e9 }'; }
sci() { awk -v b="${1:--}" 'BEGIN { if (b == "-") print "-"; else printf "%.4g", b }'; }
now() { date +%s.%N; }

# run NAME SECONDS PROG ARGS... -> $out/NAME.txt (and .json); sets rc, secs
run() {
    local name=$1 limit=$2 prog=$3
    shift 3
    local t0
    t0=$(now)
    timeout "$limit" $MPIEXEC -n "$N" "$BUILD/$prog" --dim "$DIM" --batch "$BATCH" --quiet "$@" \
        > "$out/$name.txt" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    echo "  $name: rc=$rc in $secs s $(grep -m1 -E '^summary:|out of memory|needs [0-9.]+ GB' "$out/$name.txt" | cut -c1-160)"
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(hostname)  build: $BUILD  commit: $(cat build/git-commit 2>/dev/null)"
    [ "$backend" = cuda ] && nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv
    grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
    echo "ZL_CPU_DEVICE_BYTES=${ZL_CPU_DEVICE_BYTES:-}"
} > "$out/machine.txt"
cat "$out/machine.txt"

# The probe: what the preflight sees at N ranks before any buffer (memory.preflight).
run probe "$TIMEOUT" stage0_ddp --layers 1 --steps 1 --json "$out/probe.json"
[ "$rc" -eq 0 ] || die "the probe run failed (rc=$rc): $out/probe.txt"
dev_free=$(jmin "$out/probe.json" device_free)
host_avail=$(jmin "$out/probe.json" host_available)
local_ranks=$(jmax "$out/probe.json" local_ranks)
dev_total=$(jmax "$out/probe.json" device_total)
probe_meminfo=$(awk '/^MemAvailable:/ { print $2 * 1024 }' /proc/meminfo)
if [ -z "$dev_free" ] || [ "$dev_free" = 0 ]; then
    die "the probe's report has no device_free: not a GPU (or no ZL_CPU_DEVICE_BYTES on the CPU build)"
fi
echo "preflight sees: $(gb "$dev_free") GB free of $(gb "$dev_total") GB per device, $(gb "$host_avail") GB host available, $local_ranks rank(s) on the node"

tsv="$out/table2.tsv"
printf 'config\tstage\toffload\tranks\tdim\tbatch\tsteps\tdevice_total\tdevice_free\thost_available\tlocal_ranks\tpred_layers\tpred_params\tpred_need_device\tpred_need_host\tnext_bound\tpaper_max_params\tfit_layers\tfit_params\tfit_rc\tfit_s\tfit_device_used\tfit_margin\tfit_repredicted_layers\tover_nopreflight_rc\tover_nopreflight_oom\tover_nopreflight_s\tover_preflight_rc\tover_preflight_s\n' > "$tsv"

for cfg in $CONFIGS; do
    prog=${cfg%+offload}
    off=()
    steps=2
    limit=$TIMEOUT
    if [ "$cfg" != "$prog" ]; then off=(--offload); steps=1; limit=$TIMEOUT_OFFLOAD; fi
    stage=${prog#stage}
    stage=${stage%_ddp}
    case $stage in 0 | 1 | 2 | 3) ;; *) die "unknown configuration '$cfg' (stage0_ddp stage1 stage2 stage3 stage2+offload stage3+offload)" ;; esac
    echo "== $cfg"
    # MemAvailable drifts between runs (page cache, freed pinned memory): move the probe's by as much.
    host_now=$(awk -v p="$host_avail" -v p0="$probe_meminfo" '/^MemAvailable:/ { printf "%.0f", p + $2 * 1024 - p0 }' /proc/meminfo)
    calc=("$ZEROCALC" --max-layers --dim "$DIM" --batch "$BATCH" --ranks "$N" --stage "$stage" --backend "$backend"
          --local-ranks "$local_ranks" "${off[@]}")
    "${calc[@]}" --memory "$dev_free" --host-memory "$host_now" --json > "$out/$cfg.zerocalc.json" ||
        die "zerocalc --max-layers failed for $cfg"
    L=$(jnums "$out/$cfg.zerocalc.json" max_layers)
    psi=$(jnums "$out/$cfg.zerocalc.json" params)
    need_dev=$(jnums "$out/$cfg.zerocalc.json" need_device)
    need_host=$(jnums "$out/$cfg.zerocalc.json" need_host)
    bound=$(grep -o '"next_bound": "[a-z]*"' "$out/$cfg.zerocalc.json" | sed 's/.*: "//; s/"//')
    paper=$("$ZEROCALC" --max-model --memory "$dev_free" --ranks "$N" --stage "$stage" "${off[@]}" |
            awk -F'|' -v row=$(( ${#off[@]} ? 4 : 3 )) 'NR == row { printf "%.0f", $2 }')
    echo "  predicted: L = $L (Psi = $psi), need $(gb "$need_dev") GB device, $(gb "$need_host") GB host per rank; L + 1 bound: $bound; paper (model states only): Psi = $paper"
    fit_l=- fit_psi=- fit_rc=- fit_s=- used=- margin=- repred=- np_rc=- np_oom=- np_s=- pf_rc=- pf_s=-
    if [ "$L" -ge 1 ]; then
        for l in "$L" $((L - 1)) $((L - 2)); do
            [ "$l" -ge 1 ] || break
            run "${cfg}_L$l" "$limit" "$prog" --layers "$l" --steps "$steps" --check --no-param-hash "${off[@]}" --json "$out/${cfg}_L$l.json"
            [ "$l" = "$L" ] && fit_rc=$rc && fit_s=$secs
            if [ "$rc" -eq 0 ]; then
                fit_l=$l
                j="$out/${cfg}_L$l.json"
                fit_psi=$(jnums "$j" params | head -1)
                used=$(jmax "$j" device_used)
                margin=$(awk -v f="$(jmin "$j" device_free)" -v n="$(jmax "$j" need_device)" 'BEGIN { printf "%.0f", f - n }')
                # The run's own preflight inputs must give the same L (the prediction is the preflight's).
                repred=$("${calc[@]}" --memory "$(jmin "$j" device_free)" --host-memory "$(jmin "$j" host_available)" --json |
                         grep -o '"max_layers": [0-9]*' | sed 's/.*: //')
                break
            fi
        done
        if [ "$bound" = host ] && [ "$HOST_OOM" != 1 ]; then
            np_rc=skipped
            echo "  ${cfg}_L$((L + 1))_nopreflight: skipped (host-bound; TABLE2_HOST_OOM=1 to pin past MemAvailable)"
        else
            run "${cfg}_L$((L + 1))_nopreflight" "$limit" "$prog" --layers $((L + 1)) --steps 1 --no-preflight "${off[@]}"
            np_rc=$rc np_s=$secs
            np_oom=no
            grep -q 'out of memory' "$out/${cfg}_L$((L + 1))_nopreflight.txt" && np_oom=yes
        fi
        run "${cfg}_L$((L + 1))" "$limit" "$prog" --layers $((L + 1)) --steps 1 "${off[@]}"
        pf_rc=$rc pf_s=$secs
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$cfg" "$stage" "$([ ${#off[@]} -gt 0 ] && echo yes || echo no)" "$N" "$DIM" "$BATCH" "$steps" "$dev_total" \
        "$dev_free" "$host_now" "$local_ranks" "$L" "$psi" "$need_dev" "$need_host" "$bound" "$paper" "$fit_l" "$fit_psi" \
        "$fit_rc" "$fit_s" "$used" "$margin" "$repred" "$np_rc" "$np_oom" "$np_s" "$pf_rc" "$pf_s" >> "$tsv"
done

# table2.md from the TSV: one line per configuration.
{
    echo "# Table 2, measured: the largest MLP each configuration trains (D = $DIM, $BATCH rows per rank, N = $N)"
    echo
    echo "$(head -1 "$out/machine.txt"); $(gb "$dev_free") GB free of $(gb "$dev_total") GB per device at the preflight"
    echo "(cudaMemGetInfo after CUDA + NCCL start), $(gb "$host_avail") GB host available (MemAvailable) for $local_ranks rank(s)."
    echo "Predicted = zerocalc --max-layers from those (the preflight's own rule); paper = zerocalc --max-model"
    echo "(model states only). L: --check passes; L + 1: --no-preflight (out of memory, exit 1) and with the preflight (exit 2)."
    echo "\"L from its preflight\": zerocalc --max-layers from the inputs that run's own preflight reported (memory.preflight)."
    echo
    echo "| config | N | predicted L | predicted Psi | paper max Psi | measured largest L | its Psi | L from its preflight | L run: rc, s | device used GB | margin GB | L + 1 no preflight: rc, OOM, s | L + 1 preflight: rc, s | L + 1 bound |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    tail -n +2 "$tsv" | while IFS=$'\t' read -r cfg _ _ n _ _ _ _ _ _ _ L psi _ _ bound paper fit_l fit_psi fit_rc fit_s used margin repred np_rc np_oom np_s pf_rc pf_s; do
        echo "| $cfg | $n | $L | $(sci "$psi") | $(sci "$paper") | $fit_l | $(sci "$fit_psi") | $repred | $fit_rc, $fit_s | $(gb "$used") | $(gb "$margin") | $np_rc, $np_oom, $np_s | $pf_rc, $pf_s | $bound |"
    done
    echo
    echo "margin = free - need at the preflight of the L run (min over ranks); the runtime adds ~0.5 GB beyond the"
    echo "tracked buffers (allocation granularity, NCCL/cuBLASLt lazy buffers), which the preflight does not count."
} > "$out/table2.md"
cat "$out/table2.md"
