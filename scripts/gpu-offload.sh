#!/bin/bash
# shellcheck disable=SC2086  # $MPIEXEC may carry options (mpirun --bind-to none): split on purpose
# gpu-offload.sh OUTDIR — the measurements behind --offload's cost (issue 12), in one lease on
# one node with 4 GPUs. Builds nothing: `make cpu cuda` first (build/bench_host_adam,
# build/cuda/bench_pinned_copy, build/cuda/stage2, build/cuda/stage3).
#   1. host Adam beside a STREAM-like triad, same threads (THREADS, default 1,16,32,64);
#   2. pinned copy bandwidth, each GPU alone and all at once, N = 1, 2, 4, and all at once beside
#      a host triad, then beside host Adam itself, on host Adam's threads (the copies up overlap
#      host Adam: shared DRAM);
#   3. stage2 and stage3 --preset lab-1b with and without --offload at N = 2 and 4, for ROWS
#      rows per rank (default 8192 32768 131072), 3 steps each (step 1 is warm-up); a run that
#      does not fit exits 2 before allocating and shows as such;
#      and, for STATIC_ROWS (default 32768), both again with a static loss scale
#      (--loss-scale 1024): no verdict to wait for, so host Adam runs beside the backward;
#   4. a markdown table: offload's cost, the offload model beside the measurement, the
#      copies and host Adam against what the benches measured.
# Each run writes OUTDIR/<name>.json and .txt; the table goes to stdout and OUTDIR/table.md.
#
# MPIEXEC defaults to `mpirun --bind-to none`: Open MPI binds each rank to one core when it
# runs 2 ranks or fewer, which leaves host Adam 1 thread (the report prints its threads).
# Host Adam uses (cores it may run on) / (ranks on the node) threads, as offload.c does.
#
# Time, measured on 4 × H200 and 64 host cores with ROWS="32768 65536" (gpu-pending.sh): 232 s
# for the benches and 16 training runs (~12 s each with start-up); the 8 static-scale runs at
# 32768 rows add ~100 s.
set -u
out=${1:?usage: gpu-offload.sh OUTDIR}
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "gpu-offload: needs an NVIDIA GPU and nvidia-smi -L lists none" >&2; exit 1; }
for b in build/bench_host_adam build/cuda/bench_pinned_copy build/cuda/stage2 build/cuda/stage3; do
    [ -x "$b" ] || { echo "gpu-offload: $b missing: run make cpu cuda first" >&2; exit 1; }
done
command -v python3 >/dev/null 2>&1 || { echo "gpu-offload: the table needs python3" >&2; exit 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIEXEC=${MPIEXEC:-mpirun --bind-to none}
THREADS=${THREADS:-1,16,32,64}
ROWS=${ROWS:-8192 32768 131072}
STATIC_ROWS=${STATIC_ROWS:-32768}
gpus=$("$(dirname "$0")/gpu-count.sh") # CUDA_VISIBLE_DEVICES's entries, else nvidia-smi -L
start=$SECONDS

{ nproc; lscpu; nvidia-smi; env | grep -E '^OMP_' || true; } > "$out/machine.txt" 2>&1
echo "== host Adam and triad, threads $THREADS"
timeout 300 build/bench_host_adam --threads "$THREADS" --vector-only --reps 3 > "$out/host_adam.txt" 2>&1
echo "rc=$?"; grep -E '^(host Adam:|summary:)' "$out/host_adam.txt"

echo "== pinned copies"
for n in 1 2 4; do
    [ "$n" -le "$gpus" ] || continue
    # loaded: beside a host triad, then host Adam itself, on the threads host Adam gets (the
    # node's cores / ranks)
    timeout 120 $MPIEXEC -n "$n" build/cuda/bench_pinned_copy --load-threads $(($(nproc) / n)) \
        > "$out/pinned_N$n.txt" 2>&1
    echo "N=$n rc=$? $(grep -E '^node' "$out/pinned_N$n.txt")"
    timeout 120 $MPIEXEC -n "$n" build/cuda/bench_pinned_copy --load-threads $(($(nproc) / n)) --load adam \
        > "$out/pinned_adam_N$n.txt" 2>&1
    echo "N=$n, loaded by host Adam: rc=$?"
done

run() { # name n prog flags...
    local name=$1 n=$2 prog=$3
    shift 3
    timeout 300 $MPIEXEC -n "$n" "build/cuda/$prog" --preset lab-1b --steps 3 --quiet --json "$out/$name.json" "$@" \
        > "$out/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc $(grep -E '^summary:' "$out/$name.txt" | grep -oE 'ms=[0-9.]+')"
    [ "$rc" -eq 0 ] || rm -f "$out/$name.json" # a run that failed or did not fit has no row
}
echo "== training runs"
for n in 2 4; do
    [ "$n" -le "$gpus" ] || continue
    for rows in $ROWS; do
        for p in stage2 stage3; do
            run "${p}_N${n}_rows${rows}" "$n" "$p" --batch "$rows"
            run "${p}_N${n}_rows${rows}_offload" "$n" "$p" --batch "$rows" --offload
            case " $STATIC_ROWS " in *" $rows "*)
                run "${p}_N${n}_rows${rows}_static" "$n" "$p" --batch "$rows" --loss-scale 1024
                run "${p}_N${n}_rows${rows}_static_offload" "$n" "$p" --batch "$rows" --loss-scale 1024 --offload ;;
            esac
        done
    done
done
echo "== $((SECONDS - start)) s in all"

python3 - "$out" "$ROWS" <<'PY' | tee "$out/table.md"
import glob, json, os, re, sys
out, rows = sys.argv[1], [int(r) for r in sys.argv[2].split()]

def summary(path):
    """key=value pairs of every 'summary:' line of a bench's output."""
    lines = []
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("summary:"):
                lines.append(dict(kv.split("=") for kv in line.split()[1:]))
    return lines

adam = {int(s["threads"]): s for s in summary(f"{out}/host_adam.txt")}
print("### Host Adam (vectorised) and the triad, same threads\n")
print("| threads | triad GB/s (12 B/el.) | host Adam fp16 GB/s (28 B/el.) | fraction | bf16 GB/s | fraction |")
print("|---|---|---|---|---|---|")
for t, s in sorted(adam.items()):
    print(f"| {t} | {s['triad_GBps']} | {s['adam_fp16_GBps']} | {s['fp16_of_triad']} | {s['adam_bf16_GBps']} | "
          f"{s['bf16_of_triad']} |")

pinned = {}
print("\n### Pinned copies, GB/s per GPU and direction (256 MiB; best of 10, loaded: median of 10)\n")
pinned_adam = {}
print("| ranks | rank | alone h2d | alone d2h | together h2d | together d2h | together both (each way) |"
      " loaded h2d | loaded d2h | loaded by host Adam h2d | loaded by host Adam d2h | host Adam's own GB/s meanwhile |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in (1, 2, 4):
    by_adam = {s["rank"]: s for s in summary(f"{out}/pinned_adam_N{n}.txt")} if os.path.exists(
        f"{out}/pinned_adam_N{n}.txt") else {}
    for s in summary(f"{out}/pinned_N{n}.txt"):
        a = by_adam.get(s["rank"], {})
        print(f"| {n} | {s['rank']} | {s['alone_h2d']} | {s['alone_d2h']} | {s['together_h2d']} | "
              f"{s['together_d2h']} | {s['together_both']} | {s.get('loaded_h2d', '—')} | {s.get('loaded_d2h', '—')} | "
              f"{a.get('loaded_h2d', '—')} | {a.get('loaded_d2h', '—')} | {a.get('load_GBps', '—')} |")
        pinned.setdefault(n, []).append(s)
        if a: pinned_adam.setdefault(n, []).append(a)

def mean(rows, key):
    """a bench figure averaged over the ranks that ran it"""
    return sum(float(s[key]) for s in rows) / len(rows)

def load(name):
    p = f"{out}/{name}.json"
    return json.load(open(p)) if os.path.exists(p) else None

def copy_GBps(j, op):
    rk = j["ranks"][0]
    return max((c["algbw_GBps"] for c in rk["comm"]["collectives"] if c["op"] == op), default=0)

print("\n### lab-1b, 3 steps (ms per step: mean of steps 2-3, rank 0)\n")
print("D = device work (model spans + collectives), A = host Adam wall time, T = copies not overlapped,"
      " all from the offload run's timeline; M = the offload run's ms per step; G = the run without offload."
      " Issue model: M <= 1.1 x max(G, A + T). Same-run model: P = max(D, A + T); serial S = D + A + T;"
      " pipelined = D - F + max(F, A + T) with F the device's work before the first loss span (host Adam"
      " waits for the verdict, then runs beside the next step's forward). Rows marked static: --loss-scale 1024,"
      " no verdict to wait for, host Adam beside the backward (the pipelined model does not apply).\n")
print("| stage | N | rows/rank | G ms | M ms | cost | D ms | A ms | thr | A GB/s x N / triad | T ms | d2h, h2d GB/s"
      " / pinned together (h2d: / loaded by a triad, / by host Adam) | max(G, A+T) | M / it | P | M/P | S | M/S | F | pipelined | M/pipelined |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in (2, 4):
    for r in rows:
        for p, v in [(p, v) for v in ("", "_static") for p in ("stage2", "stage3")]:
            g, o = load(f"{p}_N{n}_rows{r}{v}"), load(f"{p}_N{n}_rows{r}{v}_offload")
            if v and not g and not o:
                continue
            p = p + (" static" if v else "")
            if not o:
                print(f"| {p} | {n} | {r} | {g['ms_per_step']:.1f} | — (did not run) |" if g else
                      f"| {p} | {n} | {r} | — | — (did not run) |")
                continue
            m = o["offload_model"]
            G = g["ms_per_step"] if g else float("nan")
            M = o["ms_per_step"]
            issue = max(G, m["host_adam_ms"] + m["transfers_not_overlapped_ms"])
            thr = int(m["host_adam_threads"])
            tri = adam.get(thr * n) or adam.get(max(adam) if adam else 0)
            a_frac = (f"{m['host_adam_GBps'] * n / float(tri['triad_GBps']):.2f} (triad {tri['threads']} thr)"
                      if tri else "—")
            pin = pinned.get(n)
            if pin:
                cp = (f"{copy_GBps(o, 'd2h'):.1f}/{mean(pin, 'together_d2h'):.1f}, "
                      f"{copy_GBps(o, 'h2d'):.1f}/{mean(pin, 'together_h2d'):.1f}")
                if all("loaded_h2d" in s for s in pin): # the copies up overlap host Adam: the loaded bound
                    pa = pinned_adam.get(n)
                    cp += f" (/{mean(pin, 'loaded_h2d'):.1f}" + (f", /{mean(pa, 'loaded_h2d'):.1f})" if pa else ")")
            else:
                cp = f"{copy_GBps(o, 'd2h'):.1f}, {copy_GBps(o, 'h2d'):.1f}"
            print(f"| {p} | {n} | {r} | {G:.1f} | {M:.1f} | {100 * (M / G - 1):+.0f}% | {m['device_ms']:.1f} | "
                  f"{m['host_adam_ms']:.1f} | {thr} | {a_frac} | {m['transfers_not_overlapped_ms']:.1f} | {cp} | "
                  f"{issue:.1f} | {M / issue:.2f} | {m['predicted_ms']:.1f} | {m['measured_over_predicted']:.2f} | "
                  f"{m['serial_ms']:.1f} | {m['measured_over_serial']:.2f} | " +
                  (f"{m['forward_ms']:.1f} | {m['pipelined_ms']:.1f} | {m['measured_over_pipelined']:.2f} |"
                   if "pipelined_ms" in m and m.get("host_adam_beside") != "backward" else "— | — | — |"))
PY
