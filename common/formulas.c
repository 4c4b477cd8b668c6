/* formulas.c — independent per-category memory and per-step traffic formulas. */
#include "formulas.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t zl_formula_host_staging_bytes(const zl_partition *p) { return 2 * p->max_unit; }

size_t zl_formula_ckpt_staging_bytes(const zl_partition *p) {
    return 4 * (p->max_unit_pad < ZL_CKPT_CHUNK_ELEMS ? p->max_unit_pad : ZL_CKPT_CHUNK_ELEMS);
}

void zl_formula_memory(const zl_partition *p, const zl_formula_config *c, zl_mem_formula *out) {
    size_t full = p->full_len, shard = p->psi_pad / (size_t)p->world; /* Ψ_full; Ψ_pad/N is exact by construction */
    *out = (zl_mem_formula){0};
    size_t *b = out->bytes;
    b[ZL_MEM_PARAMS_FP16] = 2 * (c->stage >= 3 ? shard : full);
    b[ZL_MEM_GRADS_FP16] = 2 * (c->stage >= 2 ? shard : full);
    int offload = c->offload && c->stage >= 2; /* the optimizer states live on the host instead */
    size_t states = 4 * (c->stage >= 1 ? shard : full);
    b[offload ? ZL_MEM_HOST_MASTER_FP32 : ZL_MEM_MASTER_FP32] = states;
    b[offload ? ZL_MEM_HOST_ADAM_M : ZL_MEM_ADAM_M] = states;
    b[offload ? ZL_MEM_HOST_ADAM_V : ZL_MEM_ADAM_V] = states;
    b[ZL_MEM_OFFLOAD_STAGING] = offload ? 2 * shard : 0; /* one 16-bit slice per unit */
    b[ZL_MEM_GRAD_BUCKET] = c->stage >= 2 ? 2 * 2 * p->max_unit_pad : 0; /* two fp16 buckets */
    b[ZL_MEM_PARAM_GATHER] = c->stage == 3 ? (size_t)(1 + c->prefetch) * 2 * p->max_unit_pad : 0;
    b[ZL_MEM_ACTIVATIONS] = zl_model_activation_bytes(c->model);
    b[ZL_MEM_SCRATCH] = zl_model_scratch_bytes(c->model) + 2 * sizeof(double); /* + the gradient statistics */
    b[ZL_MEM_WORKSPACE] = c->workspace_bytes;
    b[ZL_MEM_HOST_STAGING] = zl_formula_host_staging_bytes(p) + zl_model_host_bytes(c->model);
    b[ZL_MEM_CKPT_STAGING] = zl_formula_ckpt_staging_bytes(p);
    for (int i = 0; i < ZL_MEM_N_MODEL_STATES; i++) out->model_states += b[i];
    out->host_states = b[ZL_MEM_HOST_MASTER_FP32] + b[ZL_MEM_HOST_ADAM_M] + b[ZL_MEM_HOST_ADAM_V];
    for (int i = 0; i < ZL_MEM_NCAT; i++)
        if (zl_mem_cat_is_device((zl_mem_cat)i)) out->peak_total += b[i];
}

zl_need zl_formula_need(const zl_partition *p, const zl_formula_config *c, int on_gpu) {
    zl_mem_formula mf;
    zl_formula_memory(p, c, &mf);
    zl_need n = {0};
    n.states = (double)mf.model_states;
    n.activations = (double)mf.bytes[ZL_MEM_ACTIVATIONS];
    n.buffers = (double)mf.peak_total - n.states - n.activations;
    n.device = on_gpu ? (double)mf.peak_total : 0;
    double host_buffers = 0; /* staging, and --offload's master, m, v and pinned staging */
    for (int i = 0; i < ZL_MEM_NCAT; i++)
        if (zl_mem_cat_is_host((zl_mem_cat)i)) host_buffers += (double)mf.bytes[i];
    n.host_states = (double)mf.bytes[ZL_MEM_HOST_MASTER_FP32] + (double)mf.bytes[ZL_MEM_HOST_ADAM_M] +
                    (double)mf.bytes[ZL_MEM_HOST_ADAM_V];
    n.host = host_buffers + (on_gpu ? 0 : (double)mf.peak_total);
    return n;
}

int zl_need_fits(zl_need n, int local_ranks, size_t dev_free, size_t host_avail) {
    int dev_ok = dev_free == 0 || n.device <= (double)dev_free;
    int host_ok = host_avail == 0 || n.host * local_ranks <= (double)host_avail;
    return dev_ok && host_ok;
}

double zl_state_bytes(double psi, double world, int stage, zl_precision p, double parts[3]) {
    double local[3];
    if (!parts) parts = local;
    parts[0] = p.param_bytes * psi / (stage >= 3 ? world : 1);
    parts[1] = p.grad_bytes * psi / (stage >= 2 ? world : 1);
    parts[2] = p.k * psi / (stage >= 1 ? world : 1);
    return parts[0] + parts[1] + parts[2];
}

double zl_paper_model_states(double psi, int world, int stage, double bytes[5]) {
    double parts[3], local[5];
    if (!bytes) bytes = local;
    double total = zl_state_bytes(psi, world, stage, ZL_PRECISION_MIXED, parts);
    bytes[0] = parts[0], bytes[1] = parts[1];
    bytes[2] = bytes[3] = bytes[4] = parts[2] / 3; /* fp32 master, m, v: 4 bytes each */
    return total;
}

double zl_comm_volume_bytes(double psi, int stage, zl_precision p) {
    if (stage == 0) return 2 * psi * p.grad_bytes;
    if (stage <= 2) return psi * p.grad_bytes + psi * p.param_bytes;
    return psi * p.grad_bytes + 2 * psi * p.param_bytes;
}

double zl_wire_bytes_step(double psi, double world, int stage, zl_precision p) {
    return (world - 1) / world * zl_comm_volume_bytes(psi, stage, p);
}

double zl_max_params(double memory, double world, int stage, zl_precision p) {
    return memory / zl_state_bytes(1.0, world, stage, p, NULL);
}

double zl_offload_state_bytes(double psi, double world, int stage, zl_precision p, double *host) {
    double parts[3];
    zl_state_bytes(psi, world, stage, p, parts);
    if (host) *host = parts[2];
    return parts[0] + parts[1];
}

double zl_max_params_offload(double memory, double world, int stage, zl_precision p) {
    return memory / zl_offload_state_bytes(1.0, world, stage, p, NULL);
}

void zl_paper_digits(double v, char *buf, size_t n) {
    if (v >= 100) {
        snprintf(buf, n, "%.0f", floor(v));
        return;
    }
    double scale = v >= 10 ? 10 : 100;
    snprintf(buf, n, "%.2f", floor(v * scale + 0.5) / scale);
    char *dot = strchr(buf, '.'); /* drop trailing zeros, then a bare point */
    if (!dot) return;
    char *end = buf + strlen(buf) - 1;
    while (end > dot && *end == '0') *end-- = '\0';
    if (end == dot) *end = '\0';
}

/* Per unit u, per rank: an all-reduce sends 2(N-1)·slice_len(u) elements, a reduce-scatter
 * or all-gather (N-1)·slice_len(u) — the ring convention with S = n_pad(u) elements. With K
 * micro-batches per step, what happens once per micro-batch counts K times: ZeRO-2's
 * gradient reduce-scatters (the full gradient never exists to accumulate in), ZeRO-3's
 * gathers and reduce-scatters, and every stage's loss all-reduce. DDP and ZeRO-1 accumulate
 * locally and sync once. Gradients sync per unit; ZeRO-3 gathers per *use* (model.h), so a
 * tied unit (GPT-2's embedding, read by the lookup and the LM head) is gathered twice each
 * way, in every micro-batch. */
void zl_formula_comm(const zl_partition *p, const zl_formula_config *c, zl_comm_formula *out) {
    *out = (zl_comm_formula){0};
    double N = p->world, fp16 = 2.0, K = zl_model_micro_batches(c->model);
    /* Stages 1-2 gather the params Adam changed; a step skipped on overflow changed none. */
    double applied = c->steps > 0 ? (double)(c->steps - c->skipped_steps) / c->steps : 1.0;
    /* --offload copies the new params up once host Adam ran: early, even in a step that diverged */
    double copied_up = c->early_update && c->steps > 0 ? (double)(c->steps - c->skipped_steps + c->diverged) / c->steps
                                                       : applied;
    for (int u = 0; u < p->n_units; u++) {
        double ring = (N - 1) * (double)p->slice_len[u] * fp16; /* (N-1)/N · S */
        switch (c->stage) {
        case 0:
            out->bytes[ZL_P_GRAD_SYNC] += 2 * ring, out->calls[ZL_P_GRAD_SYNC] += 1;
            break;
        case 1:
            out->bytes[ZL_P_GRAD_SYNC] += (c->grad_sync_allreduce ? 2 : 1) * ring;
            out->calls[ZL_P_GRAD_SYNC] += 1;
            out->bytes[ZL_P_GATHER_STEP] += applied * ring, out->calls[ZL_P_GATHER_STEP] += applied;
            break;
        case 2:
            out->bytes[ZL_P_GRAD_SYNC] += K * ring, out->calls[ZL_P_GRAD_SYNC] += K;
            out->bytes[ZL_P_GATHER_STEP] += applied * ring, out->calls[ZL_P_GATHER_STEP] += applied;
            break;
        default:
            out->bytes[ZL_P_GRAD_SYNC] += K * ring, out->calls[ZL_P_GRAD_SYNC] += K;
            if (!c->no_param_hash) /* once, for the hash */
                out->bytes[ZL_P_GATHER_FINAL] += ring, out->calls[ZL_P_GATHER_FINAL] += 1;
        }
    }
    for (int k = 0; c->stage == 3 && k < zl_model_n_uses(c->model); k++) {
        double ring = (N - 1) * (double)p->slice_len[zl_model_unit_of_use(c->model, k)] * fp16;
        out->bytes[ZL_P_GATHER_FWD] += K * ring, out->calls[ZL_P_GATHER_FWD] += K;
        out->bytes[ZL_P_GATHER_BWD] += K * ring, out->calls[ZL_P_GATHER_BWD] += K;
    }
    if (c->offload && c->stage >= 2) /* copies of this rank's slices: S bytes each, no ring factor */
        for (int u = 0; u < p->n_units; u++) {
            double slice = (double)p->slice_len[u] * fp16;
            out->bytes[ZL_P_OFFLOAD_GRADS] += slice, out->calls[ZL_P_OFFLOAD_GRADS] += 1;
            out->bytes[ZL_P_OFFLOAD_PARAMS] += copied_up * slice, out->calls[ZL_P_OFFLOAD_PARAMS] += copied_up;
        }
    /* Control: the fp32 loss of every micro-batch; from ZeRO-1 on also, once per step, the
     * gradient statistics (Σg², non-finite count: two fp64), since no rank holds the whole
     * gradient. */
    out->bytes[ZL_P_CONTROL] = 2 * (N - 1) / N * (K * 4.0 + (c->stage >= 1 ? 16.0 : 0.0));
    out->calls[ZL_P_CONTROL] = K + (c->stage >= 1 ? 1 : 0);
    for (int i = 0; i < ZL_NPURPOSES; i++)
        if (zl_purpose_in_step_total((zl_purpose)i)) out->total += out->bytes[i];
    out->transfer_total = out->bytes[ZL_P_OFFLOAD_GRADS] + out->bytes[ZL_P_OFFLOAD_PARAMS];
}

double zl_paper_wire_bytes(double psi, int world, int stage) {
    return zl_wire_bytes_step(psi, world, stage, ZL_PRECISION_MIXED);
}
