#!/usr/bin/env python3
"""torch_gpt_reference.py — zerolab's GPT (model/gpt.h) rebuilt in PyTorch, as an independent
check of one step S (default 1): the loss and the gradient norm a zerolab program reports
must equal what PyTorch computes from the same parameters and the same tokens, within --rtol
(default 1e-3).

    python3 tests/gpu/torch_gpt_reference.py [--build build/cuda] [--stage 0..3] [-n N] [--step S]
        [--mpiexec "mpirun --oversubscribe"] [--device cpu|cuda] [--rtol 1e-3] [--keep DIR]
        -- PROGRAM-FLAGS...          e.g. -- --preset gpt-tiny   or   -- --preset gpt2-124m --batch 1

What it runs (PROGRAM = BUILD/stage0_ddp, stage1, stage2 or stage3, on N ranks):
  1. PROGRAM FLAGS --steps S --json a.json: the loss and gradient norm of step S (JSON
     "loss"[S-1], "grad_norm"[S-1]), the model's shape ("config") and the 16-bit format ("dtype").
  2. The parameters step S starts from, written by the very program under test (--dump-params:
     unpadded, raw, rank 0; CUDA init on a GPU build):
       S = 1: PROGRAM FLAGS --steps 1 --inject-overflow 1 --dump-params p.bin — rank N-1 writes
              +inf into a gradient, so step 1 makes no update (skipped, or "diverged" under a
              static scale), and a step without an update changes nothing (common/numerics.h):
              the dump holds the initial parameters. Its loss must equal run 1's bit for bit.
       S > 1: PROGRAM FLAGS --steps S-1 --dump-params p.bin — the parameters after S-1 steps
              (the runs are deterministic: run 1 passes through the same ones). Trained
              weights make a sharper test than the small initial ones, under which GELU's
              tanh form or the attention scale barely show.
  3. build/zlbatch --out batch.bin --ranks N --step S FLAGS: step S's global batch, N·K·B rows
     of T+1 tokens (tools/zlbatch.c; the same host function the programs load batches with).

The reference. The GPT-2 of model/gpt.h, written from its description, not from zerolab's
kernels: token + position embedding; L pre-LN blocks (LayerNorm eps 1e-5, fused QKV x·W + b with
W stored D×3D and columns q | k | v, head h at columns h·hd of each; causal softmax of
q·kᵀ/sqrt(hd); output projection; MLP 4D with tanh GELU); the final LayerNorm; the LM head tied
to the token embedding over the V real rows of wte (the padding rows up to Vp are parameters
but masked out of the softmax); cross-entropy of the next token, mean over all N·K·B·T
positions. Parameter layout, unit after unit (unpadded, as --dump-params writes it):
  unit 0      wte Vp×D, wpe T×D
  unit 1..L   ln1 g, b (D each), Wqkv D×3D, bqkv 3D, Wo D×D, bo D, ln2 g, b, Wfc D×4D, bfc 4D,
              Wproj 4D×D, bproj D                                   (12D² + 13D)
  unit L+1    final LayerNorm g, b
It computes in fp32 from the 16-bit parameters (widened exactly); zerolab rounds every
activation to 16 bits, so the two agree to about 1e-4 relative, not bit for bit.

The gradient norm. zerolab reports ‖ḡ‖₂ over all Ψ parameters, where ḡ = (Σ_r g_r)/(S·N): the
16-bit gradients of the N ranks (each of loss_scale S times its rank's mean loss, K micro-batches
each weighted 1/K) summed by the gradient sync, then unscaled and divided by N — the unscaled
gradient of the global mean loss over all N·K·B·T positions, before clipping
(common/numerics.c: sqrt(Σg²)·1/(S·N)). Here: the fp32 autograd gradient of that same mean
loss with respect to the flat parameter vector, and its L2 norm (the squares summed in fp64,
as zerolab sums them: in fp32, over gpt2-124m's 124M elements, PyTorch's CPU norm comes out
1.3% low).

Exit 0 when both agree within --rtol, 1 otherwise (or when a run fails). Needs PyTorch only
(no numpy); --device cuda uses a GPU when PyTorch has one.
"""
import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")  # a numpy-less torch warns on import
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PROGS = ["stage0_ddp", "stage1", "stage2", "stage3"]
LN_EPS = 1e-5  # kernels/gpt_kernels.h ZL_GPT_LN_EPS


def run(cmd, ok=(0,)):
    """Run a command; stop with its output if it exits with another code."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode not in ok:
        sys.exit(f"torch_gpt_reference: `{shlex.join(cmd)}` exited {p.returncode}:\n{p.stdout[-3000:]}")
    return p


def padded_vocab(v):
    return (v + 63) // 64 * 64  # model/gpt.h zl_gpt_padded_vocab


def unpack(flat, L, D, Vp, T):
    """Views into the flat parameter vector, in zerolab's unit order (see the top)."""
    off = 0

    def take(*shape):
        nonlocal off
        n = math.prod(shape)
        t = flat[off:off + n].view(*shape)
        off += n
        return t

    p = {"wte": take(Vp, D), "wpe": take(T, D), "blocks": []}
    for _ in range(L):
        p["blocks"].append({
            "ln1_g": take(D), "ln1_b": take(D), "Wqkv": take(D, 3 * D), "bqkv": take(3 * D),
            "Wo": take(D, D), "bo": take(D), "ln2_g": take(D), "ln2_b": take(D),
            "Wfc": take(D, 4 * D), "bfc": take(4 * D), "Wproj": take(4 * D, D), "bproj": take(D)})
    p["lnf_g"], p["lnf_b"] = take(D), take(D)
    return p, off


def gpt_loss(p, tokens, targets, H, V):
    """Mean next-token cross-entropy over every position of the batch (rows × T)."""
    rows, T = tokens.shape
    D = p["wte"].shape[1]
    hd = D // H
    x = p["wte"][tokens] + p["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    for b in p["blocks"]:
        h = F.layer_norm(x, (D,), b["ln1_g"], b["ln1_b"], LN_EPS)
        q, k, v = (h @ b["Wqkv"] + b["bqkv"]).split(D, dim=-1)
        q, k, v = (t.view(rows, T, H, hd).transpose(1, 2) for t in (q, k, v))  # rows, H, T, hd
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        y = s.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
        x = x + y.transpose(1, 2).reshape(rows, T, D) @ b["Wo"] + b["bo"]
        h = F.layer_norm(x, (D,), b["ln2_g"], b["ln2_b"], LN_EPS)
        x = x + F.gelu(h @ b["Wfc"] + b["bfc"], approximate="tanh") @ b["Wproj"] + b["bproj"]
    x = F.layer_norm(x, (D,), p["lnf_g"], p["lnf_b"], LN_EPS)
    logits = x @ p["wte"][:V].t()  # the tied head over the real vocabulary only
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def relative(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("ZL_BUILD", "build/cpu"))
    ap.add_argument("--stage", type=int, default=0, choices=range(4))
    ap.add_argument("-n", type=int, default=1, help="ranks")
    ap.add_argument("--step", type=int, default=1, help="the step to check (its parameters and batch)")
    ap.add_argument("--mpiexec", default=os.environ.get("ZL_MPIEXEC", "mpiexec"))
    ap.add_argument("--zlbatch", default="build/zlbatch")
    ap.add_argument("--device", default="cpu", help="where PyTorch computes: cpu or cuda")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--keep", help="keep the runs' files in this directory")
    ap.add_argument("flags", nargs=argparse.REMAINDER, help="-- then the program's flags")
    a = ap.parse_args()
    flags = a.flags[1:] if a.flags[:1] == ["--"] else a.flags
    device = a.device if a.device != "cuda" or torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (the default, said aloud)
    torch.backends.cudnn.allow_tf32 = False

    work = a.keep or tempfile.mkdtemp(prefix="zl_torchref_")
    os.makedirs(work, exist_ok=True)
    launch = shlex.split(a.mpiexec) + ["-n", str(a.n), os.path.join(a.build, PROGS[a.stage])] + flags
    j1, j2 = os.path.join(work, "a.json"), os.path.join(work, "b.json")
    dump, batch, S = os.path.join(work, "p.bin"), os.path.join(work, "batch.bin"), a.step
    run(launch + ["--steps", str(S), "--quiet", "--json", j1])
    if S == 1:  # exit 3: an overflow under a static loss scale (bf16) ends the run, unapplied all the same
        run(launch + ["--steps", "1", "--quiet", "--inject-overflow", "1", "--dump-params", dump, "--json", j2],
            ok=(0, 3))
    else:
        run(launch + ["--steps", str(S - 1), "--quiet", "--dump-params", dump, "--json", j2])
    run([a.zlbatch, "--out", batch, "--ranks", str(a.n), "--step", str(S)] + flags)
    with open(j1) as f:
        r1 = json.load(f)
    with open(j2) as f:
        r2 = json.load(f)

    c = r1["config"]
    if c.get("model") != "gpt":
        sys.exit("torch_gpt_reference: the flags do not select --model gpt")
    L, D, H, T, V, B, K = c["layers"], c["dim"], c["heads"], c["seq"], c["vocab"], c["batch"], c["accum"]
    Vp, N = padded_vocab(V), r1["world"]
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}[r1["dtype"]]
    loss_zl, norm_zl = r1["loss"][S - 1], r1["grad_norm"][S - 1]
    if norm_zl is None:
        sys.exit(f"torch_gpt_reference: step {S} overflowed (grad_norm null): pass a smaller --loss-scale-init")
    problems = []
    if r1.get("status") != "ok" or r2["loss"][:S - 1] != r1["loss"][:S - 1]:
        problems.append(f"run 1 ({r1.get('status')}) and the parameter run disagree on the steps before {S}")
    if S == 1 and r2["loss"][0] != loss_zl:
        problems.append(f"the skipped-step run's loss {r2['loss'][0]!r} differs from {loss_zl!r}")
    if S == 1 and r2.get("skipped_steps") != [1] and r2.get("status") != "diverged":  # either way, no update
        problems.append(f"--inject-overflow 1 did not stop step 1's update (skipped_steps {r2.get('skipped_steps')})")

    with open(dump, "rb") as f:
        raw = bytearray(f.read())
    flat = torch.frombuffer(raw, dtype=half).to(device=device, dtype=torch.float32)  # exact widening
    flat.requires_grad_(True)
    p, n = unpack(flat, L, D, Vp, T)
    if n != flat.numel() or n != r1["params"]:
        sys.exit(f"torch_gpt_reference: layout has {n} parameters, the dump {flat.numel()}, the report {r1['params']}")
    with open(batch, "rb") as f:
        rows = torch.frombuffer(bytearray(f.read()), dtype=torch.int32).view(N * K * B, T + 1).long().to(device)
    loss = gpt_loss(p, rows[:, :T], rows[:, 1:], H, V)
    loss.backward()
    # Σg² in fp64, as zerolab's zl_grad_stats: an fp32 reduction over 124M squares (gpt2-124m)
    # comes out 1.3% low on CPU PyTorch, while every gradient element agrees with an fp64 run.
    loss_ref, norm_ref = loss.item(), flat.grad.double().norm().item()

    e_loss, e_norm = relative(loss_zl, loss_ref), relative(norm_zl, norm_ref)
    print(f"{PROGS[a.stage]} step {S} N={N} L={L} D={D} H={H} T={T} V={V} B={B} K={K} {r1['dtype']} ({r1['backend']}; "
          f"reference fp32 on {device}):")
    print(f"  loss       zerolab {loss_zl:.7f}  torch {loss_ref:.7f}  rel {e_loss:.2e}")
    print(f"  grad norm  zerolab {norm_zl:.7g}  torch {norm_ref:.7g}  rel {e_norm:.2e}")
    if e_loss > a.rtol:
        problems.append(f"loss differs by {e_loss:.2e} relative (> {a.rtol})")
    if e_norm > a.rtol:
        problems.append(f"gradient norm differs by {e_norm:.2e} relative (> {a.rtol})")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    for msg in problems:
        print(f"  FAIL: {msg}")
    print("  ok" if not problems else "  FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
