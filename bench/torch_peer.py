"""torch_peer.py — zerolab's four programs written the PyTorch way, for side-by-side speed.

The same residual MLP (model/mlp.h): L blocks y = x + gelu_tanh(x·W1 + b1)·W2 + b2, W1 D×4D,
W2 4D×D, one shard unit per block; MSE against a fixed teacher; fp16 compute with fp32 master
weights and Adam (zerolab's defaults: lr = 1e-3·min(1, 256/D), betas 0.9/0.999, eps 1e-8, wd 0);
loss scaling dynamic (65536, halved on overflow, doubled after 1000 good steps) or static.

    stage 0  DistributedDataParallel over an fp16 model; AdamW on fp32 master copies
    stage 1  the same, its optimizer wrapped in ZeroRedundancyOptimizer (ZeRO-1)
    stage 2  FSDP1, ShardingStrategy.SHARD_GRAD_OP, MixedPrecision(fp16, reduce fp16)
    stage 3  FSDP2 fully_shard, MixedPrecisionPolicy(fp16, reduce fp16)

Stages 0 and 1 keep zerolab's layout: fp16 params and grads, the fp32 master and Adam m, v in
the optimizer (MasterAdamW), so DDP holds 16Ψ, ZeRO-1 4Ψ + 12Ψ/N, and both move fp16 bytes.
FSDP has its own mixed precision: fp32 sharded params are the master, cast to fp16 per unit
for compute; ShardedGradScaler scales the loss. The data are random on the GPU with zerolab's
distribution (x ~ N(0, 1/3), t_j = x_j + relu(x_{j+1})/2 - x_{j+2}/4), not its bits.

    python3 -m torch.distributed.run --nproc_per_node 2 bench/torch_peer.py --stage 2 --preset lab-1b
prints one line: peer: stage= world= ms= tflops= peak= used= loss= sm_mhz= (TFLOP/s = 6·Ψ·rows/step;
sm_mhz: rank 0's median SM clock through the timed steps, nvml_clocks.py).
Without a GPU it runs on CPU ranks over gloo (tiny shapes only: a check of the code paths).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from nvml_clocks import Clocks  # this directory: the GPU's clocks through the timed steps

PRESETS = {"tiny": (2, 32, 4, 10), "lab-1b": (8, 4096, 8192, 10), "fill": (14, 8192, 1024, 10)}  # L, D, B, steps


class Block(nn.Module):
    """One residual MLP block: one shard unit (8D² + 5D params)."""

    def __init__(self, dim):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def build_model(L, D, device):
    """zerolab's init: W uniform in ±2^-k, k = round(log2 sqrt(fan_in)), W2 halved; biases 0."""
    k1 = (D.bit_length() - 1 + 1) // 2
    k2 = ((4 * D).bit_length() - 1 + 1) // 2 + 1
    with torch.device(device):
        model = nn.Sequential(*[Block(D) for _ in range(L)])
    with torch.no_grad():
        for b in model:
            b.fc1.weight.uniform_(-(2.0**-k1), 2.0**-k1)
            b.fc2.weight.uniform_(-(2.0**-k2), 2.0**-k2)
            b.fc1.bias.zero_(), b.fc2.bias.zero_()
    return model


class LossScale:
    """zerolab's scaler for stages 0 and 1: skip and halve on overflow, double after `window`."""

    def __init__(self, scale, dynamic, window=1000):
        self.scale, self.dynamic, self.window, self.good = scale, dynamic, window, 0

    def finite(self, params):
        """The overflow verdict on the all-reduced fp16 grads (the same on every rank); one sync."""
        norms = [torch.linalg.vector_norm(p.grad, dtype=torch.float32) for p in params]
        ok = bool(torch.stack(norms).sum().isfinite())
        if not ok and self.dynamic:
            self.scale, self.good = self.scale / 2, 0
        elif ok and self.dynamic:
            self.good += 1
            if self.good == self.window:
                self.scale, self.good = self.scale * 2, 0
        return ok


SCALE = LossScale(65536.0, True)


class MasterAdamW(torch.optim.Optimizer):
    """AdamW on fp32 master copies of fp16 params; writes the rounded result back into them.
    One inner AdamW per 4 tensors (a block), so the fp32 copy of the grads is one block at a time."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        ps = [p for g in self.param_groups for p in g["params"]]
        fused = ps[0].is_cuda
        self.chunks = []
        # The fused AdamW unscales the gradient in its own kernel (the attributes GradScaler sets
        # for it): no separate pass over the fp32 copy. found_inf stays 0: LossScale.finite has
        # already skipped a step that overflowed.
        self.found_inf = torch.zeros((), device=ps[0].device, dtype=torch.float32)
        for i in range(0, len(ps), 4):
            half = ps[i : i + 4]
            master = [p.detach().float() for p in half]
            opt = torch.optim.AdamW(master, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused)
            self.chunks.append((half, master, opt))

    @torch.no_grad()
    def step(self, closure=None):
        scale = torch.full((), SCALE.scale, device=self.found_inf.device, dtype=torch.float32)
        for half, master, opt in self.chunks:
            for p, m in zip(half, master):
                m.grad = p.grad.float()  # DDP already averaged
            if opt.defaults.get("fused"):  # unscaled inside the fused kernel
                opt.grad_scale, opt.found_inf = scale, self.found_inf
            else:
                for m in master:
                    m.grad.div_(scale)
            opt.step()
            for p, m in zip(half, master):
                m.grad = None
                p.copy_(m)


def wrap(stage, model, device, hp, scale):
    """The PyTorch counterpart of zerolab's stage: (model, optimizer, FSDP grad scaler or None)."""
    ids = [device.index] if device.type == "cuda" else None
    if stage in (0, 1):
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model.half(), device_ids=ids, gradient_as_bucket_view=True)
        if stage == 0:
            return model, MasterAdamW(model.parameters(), **hp), None
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=MasterAdamW, **hp), None
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    if stage == 2:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        mp = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float16)
        model = FSDP(model, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP, mixed_precision=mp,
                     auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=device if device.type == "cuda" else None)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        mp = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float16)
        for b in model:
            fully_shard(b, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), fused=device.type == "cuda", **hp)
    growth = SCALE.window if SCALE.dynamic else 1 << 30  # static: never grows
    return model, opt, ShardedGradScaler(device.type, init_scale=scale, growth_interval=growth)


def batch(gen, rows, dim, device):
    """Random inputs with zerolab's distribution and the teacher's targets, fp16, on the device."""
    x = torch.randn(rows, dim, device=device, generator=gen).mul_(3**-0.5)
    t = x + 0.5 * F.relu(x.roll(-1, 1)) - 0.25 * x.roll(-2, 1)
    return x.half(), t.half()


def train_step(model, opt, scaler, gen, rows, dim, device):
    x, t = batch(gen, rows, dim, device)
    loss = F.mse_loss(model(x).float(), t.float())
    if scaler is None:  # stages 0, 1: zerolab's protocol
        (loss * SCALE.scale).backward()
        if SCALE.finite(list(model.parameters())):
            opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    model.zero_grad(set_to_none=True)
    return loss.detach()


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stage", type=int, choices=range(4), required=True)
    p.add_argument("--preset", choices=PRESETS, default="tiny")
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--batch", type=int, help="rows per rank per step")
    p.add_argument("--steps", type=int, help="total steps, warm-up included (zerolab: the first is warm-up)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--lr", type=float)
    p.add_argument("--loss-scale", default="dynamic", help="dynamic, or a number (static)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="write the result here (rank 0)")
    a = p.parse_args()
    L, D, B, S = PRESETS[a.preset]
    a.layers, a.dim, a.batch, a.steps = a.layers or L, a.dim or D, a.batch or B, a.steps or S
    if a.steps <= a.warmup:
        p.error("--steps must exceed --warmup")
    if a.lr is None:
        a.lr = 1e-3 * min(1.0, 256.0 / a.dim)
    return a


def bus_id(device):
    """The GPU's PCI bus id as NVML takes it ("" where this torch does not say: NVML then refuses)."""
    p = torch.cuda.get_device_properties(device)
    try:
        return "%08x:%02x:%02x.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
    except AttributeError:
        return ""


def main():
    a = parse()
    cuda = torch.cuda.is_available()
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    world = dist.get_world_size()
    dynamic = a.loss_scale == "dynamic"
    SCALE.scale, SCALE.dynamic = 65536.0 if dynamic else float(a.loss_scale), dynamic
    hp = dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    torch.manual_seed(a.seed)  # the same init on every rank
    model, opt, scaler = wrap(a.stage, build_model(a.layers, a.dim, device), device, hp, SCALE.scale)
    gen = torch.Generator(device=device)
    gen.manual_seed(a.seed * 1000003 + rank)  # each rank its own rows
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    losses = [train_step(model, opt, scaler, gen, a.batch, a.dim, device) for _ in range(a.warmup)]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    dist.barrier()
    # One mark before the timed steps and one after each: CUDA events on the GPU (recorded
    # without waiting, read once at the end), the host clock on the CPU. The mean is what the
    # run cost; the median what a typical step takes (zerolab reports both).
    timed = a.steps - a.warmup
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(timed + 1)] if cuda else [0.0] * (timed + 1)

    def mark(i):
        if cuda:
            marks[i].record()
        else:
            marks[i] = time.perf_counter()

    clocks = Clocks(bus_id(device)) if cuda else None
    if clocks:
        clocks.start()
    mark(0)
    for i in range(timed):
        losses.append(train_step(model, opt, scaler, gen, a.batch, a.dim, device))
        mark(i + 1)
    sync()
    if clocks:
        clocks.stop(timed)  # one last reading: the energy over the timed steps
    clk = clocks.summary() if clocks else {"readings": 0, "why": "no GPU"}
    step_ms = [marks[i].elapsed_time(marks[i + 1]) if cuda else (marks[i + 1] - marks[i]) * 1e3 for i in range(timed)]
    ms = sum(step_ms) / timed
    ms_median = statistics.median(step_ms)

    psi = a.layers * (8 * a.dim * a.dim + 5 * a.dim)
    tflops = 6.0 * psi * a.batch / (ms * 1e-3) / 1e12
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    free, total = torch.cuda.mem_get_info() if cuda else (0, 0)
    out = dict(stage=a.stage, world=world, impl=["ddp", "zero1", "fsdp1-shard_grad_op", "fsdp2-fully_shard"][a.stage],
               layers=a.layers, dim=a.dim, rows=a.batch, steps=a.steps, warmup=a.warmup, psi=psi, ms=ms,
               ms_median=ms_median, step_ms=step_ms,
               tflops=tflops, peak=peak, used=total - free, loss_first=losses[0].item(), loss=losses[-1].item(),
               loss_scale=SCALE.scale if scaler is None else scaler.get_scale(), torch=torch.__version__,
               device=torch.cuda.get_device_name(device) if cuda else "cpu", clocks=clk)
    if rank == 0:
        print("peer: stage=%d world=%d impl=%s ms=%.3f ms_median=%.3f tflops=%.4g peak=%d used=%d loss=%.6f sm_mhz=%s"
              % (a.stage, world, out["impl"], ms, ms_median, tflops, peak, out["used"], out["loss"],
                 "%.0f" % clk["sm_mhz_median"] if clk["readings"] else "none"), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    del model, opt, scaler  # before the process group goes (gloo aborted at exit otherwise)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
