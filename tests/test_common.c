/* test_common.c — unit tests for the common layer: partition math, memory and traffic
 * formulas (against hand-computed numbers and the paper's Table 1), the tracked
 * allocator and the argument parser. References are computed independently here:
 * brute-force loops and numbers worked out by hand, never the function under test. */
#define _POSIX_C_SOURCE 200809L /* setenv, nanosleep: the clock-reader test */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clocks.h"
#include "common/args.h"
#include "common/formulas.h"
#include "common/gemm_table.h"
#include "common/preflight.h"
#include "common/replace.h"
#include "common/report.h"
#include "common/throughput.h"
#include "common/util.h"
#include "common/trace.h"
#include "model/model.h"

/* ---- partition ---------------------------------------------------------------- */

static zl_model_shape mlp(int layers, int dim, int rows) {
    return (zl_model_shape){.kind = ZL_MODEL_MLP, .layers = layers, .dim = dim, .rows = rows};
}

/* Smallest multiple of N that is >= n, found by counting (no division). */
static size_t brute_pad(size_t n, size_t N) {
    size_t p = 0;
    while (p < n) p += N;
    return p;
}

static void check_partition(const size_t *sizes, int n_units, int N) {
    zl_partition p;
    cr_assert_eq(zl_partition_init(&p, sizes, n_units, N), 0);
    size_t psi = 0, psi_pad = 0, full = 0, shard_len = 0, max_pad = 0;
    for (int u = 0; u < n_units; u++) {
        size_t want = brute_pad(sizes[u], (size_t)N);
        cr_assert_eq(p.n[u], sizes[u]);
        cr_assert_eq(p.n_pad[u], want, "unit %d n=%zu N=%d: n_pad %zu, want %zu", u, sizes[u], N, p.n_pad[u], want);
        cr_assert_eq(p.slice_len[u] * (size_t)N, p.n_pad[u]);
        cr_assert_eq(p.off[u], psi);
        cr_assert_eq(p.off_pad[u], full, "unit %d N=%d: off_pad %zu, want %zu", u, N, p.off_pad[u], full);
        cr_assert_eq(p.off_pad[u] * 2 % 16, 0, "unit %d of a full fp16 buffer starts off a 16-byte line", u);
        cr_assert_eq(p.slice_off[u], shard_len);
        /* The N slices tile [0, n_pad) exactly, in rank order, without gaps or overlap. */
        size_t expect_begin = 0;
        for (int r = 0; r < N; r++) {
            size_t b, e;
            zl_partition_slice_range(&p, u, r, &b, &e);
            cr_assert_eq(b, expect_begin);
            cr_assert_eq(e - b, p.slice_len[u]);
            expect_begin = e;
        }
        cr_assert_eq(expect_begin, p.n_pad[u]);
        psi += sizes[u], psi_pad += want, shard_len += want / (size_t)N;
        full += brute_pad(want, 8); /* the next unit starts on a 16-byte line */
        if (want > max_pad) max_pad = want;
    }
    cr_assert_eq(p.psi, psi);
    cr_assert_eq(p.psi_pad, psi_pad);
    cr_assert_eq(p.shard_len * (size_t)N, p.psi_pad);
    cr_assert_eq(p.full_len, full);
    cr_assert(p.full_len - p.psi_pad < 8 * (size_t)n_units, "gaps of at most 7 elements a unit");
    cr_assert_eq(p.max_unit_pad, max_pad);
    zl_partition_free(&p);
}

Test(partition, many_sizes_and_world_sizes) {
    const size_t sizes[] = {1, 2, 3, 5, 7, 8, 13, 64, 100, 1000, 1023, 4097, 65537, 87, 16704 / 2};
    const int worlds[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 63, 64, 1000, 4096};
    int n = (int)(sizeof sizes / sizeof sizes[0]);
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        check_partition(sizes, n, worlds[w]);
        for (int k = 0; k < n; k++) check_partition(&sizes[k], 1, worlds[w]); /* single units, incl. N > n */
    }
}

Test(partition, world_larger_than_unit_pads_to_world) {
    size_t sizes[] = {3};
    zl_partition p;
    cr_assert_eq(zl_partition_init(&p, sizes, 1, 8), 0);
    cr_assert_eq(p.n_pad[0], 8); /* five ranks own only padding */
    cr_assert_eq(p.slice_len[0], 1);
    zl_partition_free(&p);
}

Test(partition, model_units_hand_computed) {
    /* D = 3: a block has 8·9 + 5·3 = 87 params; N = 4 pads it to 88. */
    zl_partition p;
    cr_assert_eq(zl_model_partition(&p, mlp(2, 3, 1), 4), 0);
    cr_assert_eq(p.psi, 174);
    cr_assert_eq(p.psi_pad, 176);
    cr_assert_eq(p.slice_len[0], 22);
    cr_assert_eq(p.off_pad[1], 88);
    cr_assert_eq(p.off[1], 87);
    cr_assert_eq(p.full_len, 176); /* 88 is a whole number of 16-byte lines: no gap */
    zl_partition_free(&p);
    /* N = 3 pads 87 to 87: unit 1 would start 174 bytes in, 14 bytes past a line; it starts at 88. */
    cr_assert_eq(zl_model_partition(&p, mlp(2, 3, 1), 3), 0);
    cr_assert_eq(p.psi_pad, 174);
    cr_assert_eq(p.off_pad[1], 88);
    cr_assert_eq(p.full_len, 176);
    zl_partition_free(&p);
}

Test(partition, overflow_is_reported) {
    size_t sizes[] = {SIZE_MAX / 8, SIZE_MAX / 8};
    zl_partition p;
    cr_assert_eq(zl_partition_init(&p, sizes, 2, 3), -1);
    zl_partition_free(&p);
}

Test(model, lab_1b_param_count) {
    /* The lab-1b preset: D = 4096, L = 8 gives Psi = 1,073,905,664 (issue text). */
    zl_partition p;
    cr_assert_eq(zl_model_partition(&p, mlp(8, 4096, 1), 2), 0);
    cr_assert_eq(p.psi, 1073905664u);
    zl_partition_free(&p);
}

static void check_model_buffers(zl_model_shape s, size_t activations, size_t scratch) {
    cr_assert_eq(zl_model_activation_bytes(s), activations);
    cr_assert_eq(zl_model_scratch_bytes(s), scratch);
    zl_mem_reset();
    zl_mem_init(malloc, free);
    zl_model *m = zl_model_create(s);
    const zl_mem_stats *st = zl_mem_get_stats();
    cr_assert_eq(st->current[ZL_MEM_ACTIVATIONS], activations);
    cr_assert_eq(st->current[ZL_MEM_SCRATCH], scratch);
    cr_assert_eq(st->current[ZL_MEM_WORKSPACE], zl_model_workspace_bytes(s));
    zl_model_free(m);
    cr_assert_eq(st->current_total, 0); /* the model frees all it allocated */
}

Test(model, buffers_allocated_equal_the_byte_formulas) {
    /* The model allocates its buffers one by one; the formulas are closed forms. Hand-computed
     * for L = 2, D = 3, B = 5 (B·D = 15): activations x 3·15 + h 2·60 + one block's a 60 fp16
     * = 2·225 = 450 (backward's dh lives in a's buffer); scratch targets and two activation
     * gradients 2·3·15 + one loss 4 = 94. */
    check_model_buffers(mlp(2, 3, 5), 450, 94);
}

Test(model, checkpointing_keeps_one_block_of_h) {
    /* x 3·15 + one block's h 60 + one block's a 60 = 165 fp16 = 330 bytes */
    zl_model_shape s = mlp(2, 3, 5);
    s.checkpoint = 1;
    check_model_buffers(s, 330, 94);
}

Test(model, keeping_holds_a_of_every_block) {
    /* x 3·15 + h 2·60 + a 2·60 = 285 fp16 = 570 bytes: backward writes dh over the block's own a */
    zl_model_shape s = mlp(2, 3, 5);
    s.keep = 1;
    check_model_buffers(s, 570, 94);
}

Test(model, one_loss_per_micro_batch) {
    zl_model_shape s = mlp(2, 3, 5);
    s.micro_batches = 3; /* 2·3·15 + 3·4 */
    check_model_buffers(s, 450, 102);
}

Test(model, mlp_uses_each_unit_once_in_order) {
    zl_model_shape s = mlp(5, 4, 1);
    cr_assert_eq(zl_model_n_units(s), 5);
    cr_assert_eq(zl_model_n_uses(s), 5);
    for (int k = 0; k < 5; k++) {
        cr_assert_eq(zl_model_unit_of_use(s, k), k);
        cr_assert(zl_model_grads_final(s, k));
        cr_assert_eq(zl_model_unit_offset(s, k), (size_t)k * (8 * 16 + 5 * 4));
    }
}

/* ---- formulas: the paper's Table 1 --------------------------------------------- */

/* Round to the paper's printed digits (3 significant figures, as Table 1 prints). */
static double paper_round(double gb) {
    if (gb >= 100) return round(gb);
    if (gb >= 10) return round(gb * 10) / 10;
    if (gb >= 1) return round(gb * 100) / 100;
    return round(gb * 100) / 100;
}

Test(formulas, paper_table1_7_5B_N4_and_N64) {
    double psi = 7.5e9;
    /* Hand-computed (bytes): N=4: P_os 4Ψ+12Ψ/4 = 52.5e9, P_os+g 2Ψ+14Ψ/4 = 41.25e9,
     * P_os+g+p 16Ψ/4 = 30e9; N=64: 31.40625e9, 16.640625e9, 1.875e9; DDP 120e9. */
    cr_assert_float_eq(zl_paper_model_states(psi, 4, 0, NULL), 120e9, 1);
    cr_assert_float_eq(zl_paper_model_states(psi, 4, 1, NULL), 52.5e9, 1);
    cr_assert_float_eq(zl_paper_model_states(psi, 4, 2, NULL), 41.25e9, 1);
    cr_assert_float_eq(zl_paper_model_states(psi, 4, 3, NULL), 30e9, 1);
    cr_assert_float_eq(zl_paper_model_states(psi, 64, 1, NULL), 31.40625e9, 1);
    cr_assert_float_eq(zl_paper_model_states(psi, 64, 2, NULL), 16.640625e9, 1);
    cr_assert_float_eq(zl_paper_model_states(psi, 64, 3, NULL), 1.875e9, 1);
    /* And the digits the paper prints in Table 1 (GB = 1e9 bytes). */
    cr_assert_float_eq(paper_round(zl_paper_model_states(psi, 4, 2, NULL) / 1e9), 41.3, 1e-9);
    cr_assert_float_eq(paper_round(zl_paper_model_states(psi, 64, 1, NULL) / 1e9), 31.4, 1e-9);
    cr_assert_float_eq(paper_round(zl_paper_model_states(psi, 64, 2, NULL) / 1e9), 16.6, 1e-9);
    cr_assert_float_eq(paper_round(zl_paper_model_states(psi, 64, 3, NULL) / 1e9), 1.88, 1e-9);
}

Test(formulas, paper_components_sum_and_shard) {
    double b[5];
    double total = zl_paper_model_states(1000, 8, 1, b);
    cr_assert_float_eq(b[0], 2000, 1e-9); /* params replicated */
    cr_assert_float_eq(b[1], 2000, 1e-9); /* grads replicated */
    cr_assert_float_eq(b[2], 500, 1e-9);  /* 4Ψ/8 */
    cr_assert_float_eq(total, 2000 + 2000 + 3 * 500, 1e-9);
}

static zl_formula_config cfg_for(int stage, int L, int D, int B) {
    return (zl_formula_config){.stage = stage, .model = mlp(L, D, B), .prefetch = 1, .workspace_bytes = 100};
}

Test(formulas, exact_memory_hand_computed) {
    /* L = 2, D = 3, N = 4: Psi_pad = 176, shard = 44 elements. B = 5 rows. */
    zl_partition p;
    zl_model_partition(&p, mlp(2, 3, 1), 4);
    zl_mem_formula f;
    zl_formula_config c = cfg_for(0, 2, 3, 5);
    zl_formula_memory(&p, &c, &f);
    cr_assert_eq(f.bytes[ZL_MEM_PARAMS_FP16], 352);
    cr_assert_eq(f.bytes[ZL_MEM_GRADS_FP16], 352);
    cr_assert_eq(f.bytes[ZL_MEM_MASTER_FP32], 704);
    cr_assert_eq(f.model_states, 352 * 2 + 704 * 3);
    /* activations: 2·B·D·[(L+1) + 4L + 4] = 2·15·15 = 450; scratch 6·15 + 4 = 94, plus the
     * two fp64 gradient statistics = 110 */
    cr_assert_eq(f.bytes[ZL_MEM_ACTIVATIONS], 450);
    cr_assert_eq(f.bytes[ZL_MEM_SCRATCH], 110);
    cr_assert_eq(f.bytes[ZL_MEM_GRAD_BUCKET], 0);
    cr_assert_eq(f.peak_total, f.model_states + 450 + 110 + 100);

    c.stage = 1;
    zl_formula_memory(&p, &c, &f);
    cr_assert_eq(f.bytes[ZL_MEM_MASTER_FP32], 176); /* 4 · 44 */
    cr_assert_eq(f.model_states, 352 + 352 + 3 * 176);
    c.stage = 2;
    zl_formula_memory(&p, &c, &f);
    cr_assert_eq(f.bytes[ZL_MEM_GRADS_FP16], 88);
    cr_assert_eq(f.bytes[ZL_MEM_GRAD_BUCKET], 2 * 2 * 88); /* two buckets of the largest padded unit */
    c.stage = 3;
    c.prefetch = 2;
    zl_formula_memory(&p, &c, &f);
    cr_assert_eq(f.bytes[ZL_MEM_PARAMS_FP16], 88);
    cr_assert_eq(f.model_states, 16 * 44); /* 16·Psi_pad/N exactly */
    cr_assert_eq(f.bytes[ZL_MEM_PARAM_GATHER], 3 * 2 * 88);
    cr_assert_eq(f.bytes[ZL_MEM_GRAD_BUCKET], 2 * 2 * 88);
    zl_partition_free(&p);
}

Test(formulas, traffic_ratios_to_ddp) {
    zl_partition p;
    zl_model_partition(&p, mlp(3, 5, 1), 3);
    zl_comm_formula ddp, s1, s1ar, s2, s3;
    zl_formula_config c = cfg_for(0, 3, 5, 2);
    zl_formula_comm(&p, &c, &ddp);
    c.stage = 1, zl_formula_comm(&p, &c, &s1);
    c.grad_sync_allreduce = 1, zl_formula_comm(&p, &c, &s1ar), c.grad_sync_allreduce = 0;
    c.stage = 2, zl_formula_comm(&p, &c, &s2);
    c.stage = 3, zl_formula_comm(&p, &c, &s3);
    /* DDP per step: 2(N-1)/N · 2Ψ_pad bytes, by hand: n = 8·25+25 = 225 -> 225 (divisible by 3), Ψ_pad = 675 */
    cr_assert_eq(p.psi_pad, 675);
    cr_assert_float_eq(ddp.total, 2.0 * 2 / 3 * 2 * 675, 1e-9);
    cr_assert_float_eq(s1.total / ddp.total, 1.0, 1e-12);
    cr_assert_float_eq(s2.total / ddp.total, 1.0, 1e-12);
    cr_assert_float_eq(s3.total / ddp.total, 1.5, 1e-12);
    cr_assert_float_eq(s1ar.total / ddp.total, 1.5, 1e-12);
    cr_assert_float_eq(ddp.calls[ZL_P_GRAD_SYNC], 3, 1e-12);
    cr_assert_float_eq(s3.calls[ZL_P_GATHER_BWD], 3, 1e-12);
    cr_assert_float_eq(zl_paper_wire_bytes(675, 3, 3) / zl_paper_wire_bytes(675, 3, 0), 1.5, 1e-12);
    zl_partition_free(&p);
}

Test(formulas, wire_bytes_convention) {
    /* nccl-tests: all-reduce 2(N-1)/N·S, reduce-scatter/all-gather (N-1)/N·S */
    cr_assert_float_eq(zl_wire_bytes(ZL_OP_ALLREDUCE, 1000, 4), 1500, 1e-9);
    cr_assert_float_eq(zl_wire_bytes(ZL_OP_REDUCE_SCATTER, 1000, 4), 750, 1e-9);
    cr_assert_float_eq(zl_wire_bytes(ZL_OP_ALLGATHER, 1000, 1), 0, 1e-9);
}

/* ---- tracked allocator -------------------------------------------------------- */

Test(alloc, accounting_current_peak_and_total) {
    zl_mem_reset();
    zl_mem_init(malloc, free);
    void *a = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 100, "a");
    void *b = zl_mem_alloc(ZL_MEM_PARAMS_FP16, 50, "b");
    void *c = zl_mem_alloc(ZL_MEM_ADAM_M, 30, "c");
    void *h = zl_mem_alloc(ZL_MEM_HOST_STAGING, 1000, "host");
    const zl_mem_stats *s = zl_mem_get_stats();
    cr_assert_eq(s->current[ZL_MEM_PARAMS_FP16], 150);
    cr_assert_eq(s->peak_total, 180); /* host staging is not device memory */
    zl_mem_free(a);
    cr_assert_eq(s->current[ZL_MEM_PARAMS_FP16], 50);
    cr_assert_eq(s->peak[ZL_MEM_PARAMS_FP16], 150);
    cr_assert_eq(s->current_total, 80);
    void *d = zl_mem_alloc(ZL_MEM_SCRATCH, 60, "d");
    cr_assert_eq(s->peak_total, 180); /* 140 now, the peak stays */
    void *e = zl_mem_alloc(ZL_MEM_SCRATCH, 100, "e");
    cr_assert_eq(s->peak_total, 240);
    cr_assert_eq(s->current[ZL_MEM_HOST_STAGING], 1000);
    zl_mem_free(b), zl_mem_free(c), zl_mem_free(d), zl_mem_free(e), zl_mem_free(h);
    cr_assert_eq(s->current_total, 0);
    zl_mem_reset();
}

Test(alloc, allocation_after_freeze_is_counted) {
    zl_mem_reset();
    zl_mem_init(malloc, free);
    void *a = zl_mem_alloc(ZL_MEM_SCRATCH, 8, "before");
    zl_mem_freeze();
    cr_assert_eq(zl_mem_get_stats()->allocations_after_freeze, 0);
    void *b = zl_mem_alloc(ZL_MEM_SCRATCH, 8, "inside the step loop");
    cr_assert_eq(zl_mem_get_stats()->allocations_after_freeze, 1);
    zl_mem_unfreeze();
    zl_mem_free_all();
    (void)a, (void)b;
    cr_assert_eq(zl_mem_get_stats()->current_total, 0);
    zl_mem_reset();
}

/* The all-gathers' buffers (params_fp16, param_gather) go through the collective pair, every
 * other device category through the device pair, and each is freed by the pair that made it. */
static int n_dev_alloc, n_dev_free, n_coll_alloc, n_coll_free;
static void *dev_alloc_counted(size_t n) { return n_dev_alloc++, malloc(n); }
static void dev_free_counted(void *p) { n_dev_free++, free(p); }
static void *coll_alloc_counted(size_t n) { return n_coll_alloc++, malloc(n); }
static void coll_free_counted(void *p) { n_coll_free++, free(p); }

Test(alloc, all_gather_buffers_use_the_collective_allocator) {
    zl_mem_reset();
    zl_mem_init(dev_alloc_counted, dev_free_counted);
    zl_mem_init_collective(coll_alloc_counted, coll_free_counted);
    for (int c = 0; c < ZL_MEM_NCAT; c++)
        if (zl_mem_cat_is_device((zl_mem_cat)c)) zl_mem_alloc((zl_mem_cat)c, 16, "one of each");
    cr_assert_eq(n_coll_alloc, 2, "params_fp16 and param_gather");
    cr_assert_eq(n_dev_alloc, ZL_MEM_HOST_STAGING - 2, "every other device category");
    const zl_mem_stats *s = zl_mem_get_stats();
    cr_assert_eq(s->current_total, 16 * (size_t)ZL_MEM_HOST_STAGING, "tracked the same either way");
    zl_mem_free_all();
    cr_assert_eq(n_coll_free, 2);
    cr_assert_eq(n_dev_free, n_dev_alloc);
    zl_mem_init_collective(NULL, NULL); /* back to the device pair for the tests after this one */
    zl_mem_reset();
}

Test(alloc, freeing_a_foreign_pointer_is_fatal, .exit_code = 1) {
    zl_mem_reset();
    int x;
    zl_mem_free(&x);
}

Test(alloc, out_of_memory_is_fatal_with_message, .exit_code = 1) {
    zl_mem_reset();
    zl_mem_init(malloc, free);
    zl_mem_alloc(ZL_MEM_PARAMS_FP16, SIZE_MAX / 2, "absurd");
}

/* ---- arguments ---------------------------------------------------------------- */

static int parse(int stage, char *err, zl_config *c, const char *line) {
    char buf[512], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "prog %s", line);
    for (char *tok = strtok(buf, " "); tok && argc < 32; tok = strtok(NULL, " ")) argv[argc++] = tok;
    return zl_args_parse(c, stage, argc, argv, err, 256);
}

Test(args, presets_and_overrides) {
    zl_config c;
    char err[256];
    cr_assert_eq(parse(0, err, &c, "--preset demo"), ZL_ARGS_OK, "%s", err);
    cr_assert_eq(c.dim, 256);
    cr_assert_eq(parse(0, err, &c, "--dim 64 --preset demo"), ZL_ARGS_OK, "%s", err);
    cr_assert_eq(c.dim, 64, "an explicit flag overrides the preset wherever it appears");
    cr_assert_eq(c.layers, 4);
    /* the last preset is the whole model: tiny after a GPT preset trains the MLP (it trained a GPT,
     * and after gpt2-124m was refused for gpt2-124m's heads) */
    cr_assert_eq(parse(0, err, &c, "--preset gpt-tiny --preset tiny"), ZL_ARGS_OK, "%s", err);
    cr_expect(c.model == ZL_MODEL_MLP && c.seq == 32 && c.heads == 2 && c.vocab == 256, "model %d", c.model);
    cr_assert_eq(parse(0, err, &c, "--preset gpt2-124m --preset tiny"), ZL_ARGS_OK, "%s", err);
    cr_expect(c.model == ZL_MODEL_MLP && c.dim == 32);
    cr_assert_eq(parse(0, err, &c, "--preset lab-1b"), ZL_ARGS_OK, "%s", err);
    cr_assert_eq(c.dim, 4096);
    cr_assert_eq(c.layers, 8);
    cr_assert_eq(c.batch, 8192);
    cr_assert_eq(parse(0, err, &c, "--seed 9007199254740992 --lr 0.01 --quiet"), ZL_ARGS_OK, "%s", err);
    cr_assert_eq(c.seed, 1ull << 53, "the largest seed a JSON number holds exactly");
    cr_assert_eq(parse(0, err, &c, "--help"), ZL_ARGS_HELP);
    /* default lr: 1e-3 up to D = 256, then 1e-3·256/D; an explicit --lr wins */
    cr_assert_eq(parse(0, err, &c, "--preset tiny"), ZL_ARGS_OK);
    cr_assert_float_eq(c.lr, 1e-3f, 1e-9);
    cr_assert_eq(parse(0, err, &c, "--preset lab-1b"), ZL_ARGS_OK);
    cr_assert_float_eq(c.lr, 6.25e-5f, 1e-10);
    cr_assert_eq(parse(0, err, &c, "--preset lab-1b --lr 0.01"), ZL_ARGS_OK);
    cr_assert_float_eq(c.lr, 0.01f, 1e-9);
}

Test(args, every_bad_value_names_its_flag) {
    struct {
        int stage;
        const char *line, *expect;
    } cases[] = {
        {0, "--dim abc", "--dim: expected an integer in [1, 16777216]"},
        {0, "--dim 0", "--dim"},
        {0, "--dim -5", "--dim"},
        {0, "--dim 12x", "--dim"},
        {0, "--dim 99999999999999999999", "--dim"},
        {0, "--layers 0", "--layers: expected an integer in [1, 1000000]"},
        {0, "--batch 0", "--batch"},
        {0, "--steps 0", "--steps"},
        {0, "--steps", "--steps: missing value"},
        {0, "--seed -1", "--seed"},
        {0, "--seed 1.5", "--seed"},
        {0, "--loss-scale 0", "--loss-scale: expected dynamic or a number in [1.18e-38, 65536]"},
        {0, "--loss-scale 1e-45", "--loss-scale: expected a number in [1.17549e-38, 65536]"}, /* 1/K is inf */
        {0, "--loss-scale 4 --loss-scale-window 10", "--loss-scale-window: the clean steps before a dynamic scale"},
        {0, "--dtype bf16 --loss-scale-window 10", "this run's scale is static (--loss-scale 1, the default for bf16)"},
        {0, "--seed \t-1", "--seed: expected an integer in [0, 9007199254740992] (2^53)"}, /* strtoull skips the tab */
        {0, "--seed 9007199254740993", "--seed: expected an integer in [0, 9007199254740992] (2^53), got"},
        {0, "--seed 18446744073709551616", "--seed: expected an integer"}, /* past 64 bits: ERANGE */
        {0, "--layers 100000 --dim 1 --batch 1 --accum 16", "--accum/--layers: 16 micro-batches of 100000 layers"},
        {0, "--model gpt --dim 1048576 --layers 100000 --seq 1 --batch 1 --heads 1", /* a GPT block is 12D² + 13D */
         "--layers/--dim: a model of 100000 layers of dim 1048576 has byte counts that overflow 64 bits"},
        {0, "--loss-scale-init 0.5", "--loss-scale-init: expected a number in [1, 1.67772e+07]"},
        {0, "--loss-scale-window 0", "--loss-scale-window"},
        {0, "--clip-grad-norm 0", "--clip-grad-norm"},
        {0, "--dtype fp8", "--dtype: expected fp16 or bf16"},
        {0, "--inject-overflow 3,x", "--inject-overflow: expected increasing step numbers"},
        {0, "--inject-overflow 3,,5", "--inject-overflow: expected increasing step numbers"},
        {0, "--inject-overflow ,3", "--inject-overflow"},
        {0, "--inject-overflow 3,", "--inject-overflow"},
        {0, "--inject-overflow 3,3", "--inject-overflow"},
        {0, "--inject-overflow 5,3", "--inject-overflow"},
        {0, "--steps 5 --inject-overflow 6", "--inject-overflow: step 6 is beyond --steps 5"},
        {0, "--loss-scale nan", "--loss-scale"},
        {0, "--lr -1", "--lr"},
        {0, "--beta1 1", "--beta1"},
        {0, "--beta2 1.5", "--beta2"},
        {0, "--eps 0", "--eps"},
        {0, "--weight-decay -0.1", "--weight-decay"},
        {0, "--preset huge", "--preset: expected one of tiny, demo, lab-1b"},
        {0, "--frobnicate 3", "unknown flag '--frobnicate'"},
        {0, "--prefetch 1", "--prefetch: only stage3 takes this flag"},
        {0, "--grad-sync allreduce", "--grad-sync: only stage1 takes this flag"},
        {0, "--offload", "--offload: only stage2 and stage3 take this flag; stage0_ddp does not"},
        {1, "--offload", "--offload: only stage2 and stage3 take this flag; stage1 does not"},
        {2, "--offload=1", "--offload takes no value"},
        {1, "--grad-sync ring", "--grad-sync: expected reducescatter or allreduce"},
        {3, "--prefetch -1", "--prefetch"},
        {3, "--layers 2 --prefetch 2", "--prefetch: expected an integer in [0, 1]"},
        {0, "--accum 0", "--accum: expected an integer in [1, 1024], got '0'"},
        {2, "--accum 1025", "--accum: expected an integer in [1, 1024]"},
        {1, "--checkpoint-activations=1", "--checkpoint-activations takes no value"},
        {0, "--dim 65536 --batch 8192", "--batch: rows*4*dim must be below 2^31"},
        {0, "--dim 16777216 --layers 100000 --batch 1", "--layers/--dim"},
        {0, "--peak-tflops 989", "--peak-tflops: only --model gpt takes this flag"},
        {0, "--preset gpt-tiny --peak-tflops 0", "--peak-tflops: expected a number in (0, 1e+06]"},
        {2, "--preset gpt-tiny --peak-tflops -3", "--peak-tflops"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zl_config c;
        char err[256];
        int rc = parse(cases[i].stage, err, &c, cases[i].line);
        cr_expect_eq(rc, ZL_ARGS_ERROR, "'%s' was accepted", cases[i].line);
        cr_expect(strstr(err, cases[i].expect) != NULL, "'%s' -> '%s', expected '%s'", cases[i].line, err,
                  cases[i].expect);
        cr_expect(strchr(err, '\n') == NULL, "one line only");
    }
}

/* --loss-scale K (static), --loss-scale dynamic and --loss-scale-init K (the dynamic scaler's first
 * scale) are separate settings: the result never depends on their order, and a first scale given to a
 * static run is refused rather than taken as its scale. */
Test(args, loss_scale_flags_do_not_depend_on_their_order) {
    struct {
        const char *line;
        int dynamic;
        float scale;
    } ok[] = {
        {"", 1, 65536.0f},
        {"--dtype bf16", 0, 1.0f},
        {"--loss-scale 128", 0, 128.0f},
        {"--loss-scale-init 1024", 1, 1024.0f},
        {"--loss-scale 128 --loss-scale dynamic", 1, 65536.0f}, /* the last --loss-scale wins, not its K */
        {"--loss-scale dynamic --loss-scale 128", 0, 128.0f},
        {"--loss-scale-init 1024 --loss-scale dynamic", 1, 1024.0f},
        {"--loss-scale dynamic --loss-scale-init 1024", 1, 1024.0f},
        {"--dtype bf16 --loss-scale-init 256", 1, 256.0f},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        zl_config c;
        char err[256];
        cr_assert_eq(parse(0, err, &c, ok[i].line), ZL_ARGS_OK, "'%s': %s", ok[i].line, err);
        cr_expect(c.loss_scale_dynamic == ok[i].dynamic && c.loss_scale == ok[i].scale, "'%s': dynamic %d scale %g",
                  ok[i].line, c.loss_scale_dynamic, c.loss_scale);
    }
    const char *refused[] = {"--loss-scale 128 --loss-scale-init 1024", "--loss-scale-init 1024 --loss-scale 128",
                             "--dtype bf16 --loss-scale 1 --loss-scale-init 8"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        zl_config c;
        char err[256];
        cr_expect_eq(parse(0, err, &c, refused[i]), ZL_ARGS_ERROR, "'%s' was accepted", refused[i]);
        cr_expect(strstr(err, "--loss-scale-init") && strstr(err, "static"), "'%s' -> '%s'", refused[i], err);
    }
}

/* Ranges are checked on the float that is stored, not on the double that was parsed. */
Test(args, float_flags_are_checked_after_narrowing) {
    struct {
        const char *line, *expect;
    } refused[] = {
        {"--beta2 0.99999999999", "(1 as a 32-bit float)"},  /* rounds to 1.0f: NaN after one step */
        {"--beta1 0.999999999999", "--beta1"},
        {"--lr 1e-50", "(0 as a 32-bit float)"},             /* underflows to 0 */
        {"--loss-scale 1e-46", "--loss-scale"},
        {"--eps 1e-46", "--eps"},
        {"--lr 1e40", "--lr"},                               /* overflows to inf */
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        zl_config c;
        char err[256];
        cr_expect_eq(parse(0, err, &c, refused[i].line), ZL_ARGS_ERROR, "'%s' was accepted", refused[i].line);
        cr_expect(strstr(err, refused[i].expect), "'%s' -> '%s'", refused[i].line, err);
    }
    zl_config c;
    char err[256];
    cr_assert_eq(parse(0, err, &c, "--beta2 0.9999999 --lr 1e-40"), ZL_ARGS_OK, "%s", err); /* < 1 and > 0 as floats */
    cr_expect(c.beta2 < 1.0f && c.lr > 0.0f);
}

Test(args, flag_equals_value_switches_and_defaults) {
    zl_config c;
    char err[256];
    cr_assert_eq(parse(3, err, &c, "--layers=5 --dim=16 --prefetch=2 --timeout=7 --check --no-preflight"), ZL_ARGS_OK,
                 "%s", err);
    cr_expect(c.layers == 5 && c.dim == 16 && c.prefetch == 2 && c.timeout_s == 7 && c.check && c.no_preflight);
    cr_assert_eq(parse(3, err, &c, "--layers 1"), ZL_ARGS_OK, "%s", err);
    cr_expect_eq(c.prefetch, 0, "default prefetch is min(1, uses - 1): an MLP of L blocks has L uses");
    cr_assert_eq(parse(3, err, &c, "--layers 4"), ZL_ARGS_OK, "%s", err);
    cr_expect_eq(c.prefetch, 1);
    /* a GPT of L blocks has L + 3 uses a step (embedding, blocks, final LN, the tied LM head
     * reading the embedding again): one block still has later uses to gather, up to 3 ahead */
    cr_assert_eq(parse(3, err, &c, "--preset gpt-tiny --layers 1"), ZL_ARGS_OK, "%s", err);
    cr_expect_eq(c.prefetch, 1, "a one-block GPT's default prefetch");
    cr_expect_eq(parse(3, err, &c, "--preset gpt-tiny --layers 1 --prefetch 3"), ZL_ARGS_OK, "%s", err);
    cr_expect_eq(parse(3, err, &c, "--preset gpt-tiny --layers 1 --prefetch 4"), ZL_ARGS_ERROR);
    cr_expect(strstr(err, "[0, 3]"), "%s", err);
    cr_expect_eq(c.timeout_s, 300, "the watchdog is on by default");
    cr_expect_eq(parse(0, err, &c, "--check=1"), ZL_ARGS_ERROR);
    cr_expect_eq(parse(0, err, &c, "--json=/tmp/a --dump-params=/tmp/a"), ZL_ARGS_ERROR);
    cr_expect(strstr(err, "same path"), "%s", err);
    cr_expect_eq(parse(0, err, &c, "--preset=demo"), ZL_ARGS_OK, "%s", err);
    cr_expect_eq(c.dim, 256);
    cr_expect(c.accum == 1 && !c.checkpoint_activations, "defaults: one micro-batch, activations kept");
    cr_assert_eq(parse(3, err, &c, "--accum=4 --checkpoint-activations"), ZL_ARGS_OK, "%s", err);
    cr_expect(c.accum == 4 && c.checkpoint_activations);
    cr_assert_eq(parse(3, err, &c, "--keep-activations"), ZL_ARGS_OK, "%s", err);
    cr_expect(c.keep_activations && !c.checkpoint_activations);
    cr_expect_eq(parse(3, err, &c, "--keep-activations --checkpoint-activations"), ZL_ARGS_ERROR);
    cr_expect(strstr(err, "drop one"), "%s", err);
    cr_expect_eq(parse(3, err, &c, "--preset gpt-tiny --keep-activations"), ZL_ARGS_ERROR);
    cr_expect(strstr(err, "the MLP's"), "%s", err);
    zl_config d;
    cr_assert_eq(parse(3, err, &d, "--accum=3 --checkpoint-activations"), ZL_ARGS_OK, "%s", err);
    cr_expect_neq(zl_args_hash(&c), zl_args_hash(&d), "ranks launched with different --accum are told apart");
}

/* --attention left out picks fused only where its kernels run: head dimension 64, fp16, and
 * --batch within the kernels' grid (ZL_GPT_FLASH_MAX_BATCH sequences); past it, strided rather
 * than a refusal of a flag the user never gave. --attention fused asked for past it is refused. */
Test(args, attention_by_shape_stays_within_the_fused_grid) {
    struct {
        const char *line;
        zl_attention want;
    } ok[] = {
        {"--model gpt --dim 64 --heads 1 --seq 1 --batch 65535", ZL_ATTENTION_FUSED},
        {"--model gpt --dim 64 --heads 1 --seq 1 --batch 65536", ZL_ATTENTION_STRIDED},
        {"--model gpt --dim 64 --heads 1 --seq 1 --batch 70000", ZL_ATTENTION_STRIDED},
        {"--model gpt --dim 64 --heads 1 --seq 1 --batch 70000 --attention strided", ZL_ATTENTION_STRIDED},
        {"--model gpt --dim 64 --heads 1 --seq 1 --batch 8 --dtype bf16", ZL_ATTENTION_STRIDED},
        {"--preset gpt2-124m --batch 4", ZL_ATTENTION_FUSED},
        {"--preset gpt-tiny", ZL_ATTENTION_STRIDED}, /* head dimension 16 */
    };
    for (int stage = 0; stage <= 3; stage++)
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            zl_config c;
            char err[256];
            cr_assert_eq(parse(stage, err, &c, ok[i].line), ZL_ARGS_OK, "stage %d '%s': %s", stage, ok[i].line, err);
            cr_expect_eq(c.attention, ok[i].want, "stage %d '%s': attention %d, want %d", stage, ok[i].line,
                         (int)c.attention, (int)ok[i].want);
        }
    zl_config c;
    char err[256];
    cr_expect_eq(parse(2, err, &c, "--model gpt --dim 64 --heads 1 --seq 1 --batch 70000 --attention fused"),
                 ZL_ARGS_ERROR);
    cr_expect(strstr(err, "--attention fused: --batch at most 65535 (got 70000)"), "%s", err);
}

Test(args, control_characters_in_values_are_escaped) {
    zl_config c;
    char err[256];
    char *argv[] = {"prog", "--dim", "1\n2\x01", NULL};
    cr_assert_eq(zl_args_parse(&c, 0, 3, argv, err, sizeof err), ZL_ARGS_ERROR);
    cr_expect(strstr(err, "got '1\\n2\\x01'"), "%s", err);
    cr_expect(strchr(err, '\n') == NULL && strchr(err, 1) == NULL, "%s", err);
}

Test(args, hash_differs_when_a_value_differs) {
    zl_config a, b;
    char err[256];
    parse(0, err, &a, "--seed 1");
    parse(0, err, &b, "--seed 2");
    cr_assert_neq(zl_args_hash(&a), zl_args_hash(&b));
    parse(0, err, &b, "--seed 1");
    cr_assert_eq(zl_args_hash(&a), zl_args_hash(&b));
}

/* ---- preflight -------------------------------------------------------------------- */

/* lab-1b (L = 8, D = 4096, B = 8192) as ZeRO-2 on two GPUs: model states 9Ψ = 9.67 GB
 * (Ψ = 1,073,905,664), activations 2·45·B·D = 3.02 GB, buffers 2 buckets of 2·n_pad plus
 * scratch 2·3·B·D + 20 = 0.74 GB: 13.4 GB in all. ZeRO-3 needs
 * 12.9 GB (8Ψ = 8.59, activations 3.02, two gather buffers and two buckets of 2·n_pad = 1.07,
 * scratch 0.20). With 13.2 GB free, stage 2 does not fit and stage 3 does. */
Test(preflight, verdict_names_needs_and_what_would_fit) {
    zl_model_shape shape = {.kind = ZL_MODEL_MLP, .layers = 8, .dim = 4096, .rows = 8192};
    zl_partition p;
    cr_assert_eq(zl_model_partition(&p, shape, 2), 0);
    zl_formula_config fc = {.stage = 2, .model = shape, .prefetch = 0};
    char msg[1024];
    cr_expect_eq(zl_preflight_verdict(&p, &fc, 1, 2, (size_t)20e9, 0, msg, sizeof msg), 0, "%s", msg);
    cr_expect_str_eq(msg, "");
    cr_assert_eq(zl_preflight_verdict(&p, &fc, 1, 2, (size_t)13.2e9, 0, msg, sizeof msg), 1);
    const char *want[] = {"stage2 needs 13.4 GB per GPU", "model states 9.7", "activations 3.0", "buffers 0.7",
                          "13.2 GB free", "stage3 needs 12.9 GB", "stage2 at N >= 3"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(msg, want[i]), "'%s' lacks '%s'", msg, want[i]);
    /* Host memory: the CPU backend's buffers live there, shared by the node's ranks: the 13.4 GB
     * above, the parameter hash's staging (2 B of a unit, 0.27 GB) and the checkpoint's (4 B of
     * 2^21 elements, 8 MB): 13.7 GB a rank, 27.4 GB for two. */
    cr_assert_eq(zl_preflight_verdict(&p, &fc, 0, 2, 0, (size_t)20e9, msg, sizeof msg), 1);
    cr_expect(strstr(msg, "x 2 rank(s) on this node = 27.4"), "%s", msg);
    cr_expect_eq(zl_preflight_verdict(&p, &fc, 0, 1, 0, (size_t)20e9, msg, sizeof msg), 0, "%s", msg);
    /* --offload on GPUs: the host holds the optimizer states, 12Ψ/N = 6.44 GB per rank, and the
     * staging; that is what the line breaks down (not the device's parts). */
    fc.offload = 1;
    cr_assert_eq(zl_preflight_verdict(&p, &fc, 1, 2, (size_t)20e9, (size_t)10e9, msg, sizeof msg), 1);
    const char *host_want[] = {"GB of host memory per rank (optimizer states 6.4, staging ", "x 2 rank(s) on this node",
                               "10.0 GB available"};
    for (size_t i = 0; i < sizeof host_want / sizeof host_want[0]; i++)
        cr_expect(strstr(msg, host_want[i]), "'%s' lacks '%s'", msg, host_want[i]);
    cr_expect(!strstr(msg, "activations"), "the host line names device parts: %s", msg);
    zl_partition_free(&p);
}

/* lab 4's small case: DDP (L = 8, D = 64, B = 8; Ψ = 264,704, 16Ψ = 4.2 MB) at N = 2 on a 4 MB device, ZeRO-1 10Ψ = 2.6 MB. Its figures are
 * megabytes, once printed as "0.0 GB" every one; ZeRO-1 fits at this N, so the line names it and
 * suggests no more ranks for any stage (it once added "stage2 at N >= 3; stage3 at N >= 3",
 * stages that fit at N = 2). */
Test(preflight, a_small_model_in_megabytes_and_only_useful_advice) {
    zl_model_shape shape = {.kind = ZL_MODEL_MLP, .layers = 8, .dim = 64, .rows = 8};
    zl_partition p;
    cr_assert_eq(zl_model_partition(&p, shape, 2), 0);
    zl_formula_config fc = {.stage = 0, .model = shape, .prefetch = 0};
    char msg[1024];
    cr_assert_eq(zl_preflight_verdict(&p, &fc, 1, 2, (size_t)4e6, 0, msg, sizeof msg), 1);
    cr_expect(strstr(msg, "stage0_ddp needs 4.3 MB per GPU") && strstr(msg, "4.0 MB free on this GPU"), "%s", msg);
    cr_expect(strstr(msg, "stage1 needs 2.7 MB"), "%s", msg);
    cr_expect(!strstr(msg, "0.0 GB") && !strstr(msg, " at N >= "), "%s", msg);
    zl_partition_free(&p);
}

/* ---- timeline: exposed communication (trace.h) --------------------------------------
 * Hand-worked cases: lengths read off the intervals, not computed by the code under test. */

static double exposed(const double *compute, int nc, const double *comm, int nm) {
    zl_interval c[8], m[8], pieces[16];
    for (int i = 0; i < nc; i++) c[i] = (zl_interval){compute[2 * i], compute[2 * i + 1]};
    for (int i = 0; i < nm; i++) m[i] = (zl_interval){comm[2 * i], comm[2 * i + 1]};
    return zl_exposed_ms(c, nc, m, nm, pieces, NULL);
}

Test(trace, union_counts_overlaps_once) {
    zl_interval iv[] = {{5, 7}, {0, 2}, {1, 3}, {6, 6.5}, {10, 10}};
    int merged;
    cr_expect_float_eq(zl_union_ms(iv, 5, &merged), 3 + 2, 1e-12); /* [0,3) and [5,7) */
    cr_expect_eq(merged, 3);                                       /* and the empty [10,10] */
    cr_expect_eq(zl_union_ms(iv, 0, &merged), 0);
    cr_expect_eq(merged, 0);
}

Test(trace, exposed_communication_hand_cases) {
    /* no compute: all communication is exposed (overlapping collectives once) */
    cr_expect_float_eq(exposed(NULL, 0, (double[]){0, 4, 2, 6}, 2), 6, 1e-12);
    /* hidden entirely under one compute span */
    cr_expect_float_eq(exposed((double[]){0, 10}, 1, (double[]){1, 3, 4, 9}, 2), 0, 1e-12);
    /* serial, as on CPU: compute [0,2) [5,6), comm [2,5) -> 3 exposed */
    cr_expect_float_eq(exposed((double[]){0, 2, 5, 6}, 2, (double[]){2, 5}, 1), 3, 1e-12);
    /* partial: comm [1,8), compute [0,3) and [4,6) (given out of order) -> [3,4) + [6,8) = 3 */
    cr_expect_float_eq(exposed((double[]){4, 6, 0, 3}, 2, (double[]){1, 8}, 1), 3, 1e-12);
    /* overlapping compute spans and two comm spans: compute [0,5)∪[3,7) = [0,7);
     * comm [6,9) and [8,12) = [6,12) -> exposed [7,12) = 5 */
    cr_expect_float_eq(exposed((double[]){0, 5, 3, 7}, 2, (double[]){8, 12, 6, 9}, 2), 5, 1e-12);
    /* a compute span inside a comm gap touches neither */
    cr_expect_float_eq(exposed((double[]){3, 4}, 1, (double[]){0, 1, 6, 8}, 2), 3, 1e-12);
}

/* The pieces of one list the other leaves uncovered, and the overlap: read off the intervals. */
Test(trace, subtract_and_intersect_hand_cases) {
    zl_interval out[8];
    /* a [0,4) [6,10), b [1,2) [3,7) [9,12) -> a \ b = [0,1) [2,3) [7,9); |a ∩ b| = 1 + 1 + 1 + 1 = 4 */
    zl_interval a[] = {{0, 4}, {6, 10}}, b[] = {{1, 2}, {3, 7}, {9, 12}};
    int n = zl_subtract_intervals(a, 2, b, 3, out);
    cr_assert_eq(n, 3);
    cr_expect(out[0].t0 == 0 && out[0].t1 == 1 && out[1].t0 == 2 && out[1].t1 == 3 && out[2].t0 == 7 && out[2].t1 == 9,
              "[%g,%g) [%g,%g) [%g,%g)", out[0].t0, out[0].t1, out[1].t0, out[1].t1, out[2].t0, out[2].t1);
    cr_expect_float_eq(zl_intersect_ms(a, 2, b, 3), 4, 1e-12);
    /* nothing to subtract: a itself; everything covered: nothing */
    cr_expect_eq(zl_subtract_intervals(a, 2, NULL, 0, out), 2);
    cr_expect(out[1].t0 == 6 && out[1].t1 == 10);
    cr_expect_eq(zl_subtract_intervals(a, 2, (zl_interval[]){{-1, 11}}, 1, out), 0);
    cr_expect_float_eq(zl_intersect_ms(a, 2, (zl_interval[]){{-1, 11}}, 1), 8, 1e-12);
    /* touching ends overlap in nothing */
    cr_expect_float_eq(zl_intersect_ms(a, 1, (zl_interval[]){{4, 6}}, 1), 0, 1e-12);
}

/* Join waits by hand: the clock offset is the median of the ends' differences (one collective
 * whose end was seen late does not move it), and a wait runs from a rank's start to the last
 * join, never before the start nor past the end. */
Test(trace, join_wait_hand_cases) {
    double scratch[4];
    zl_interval mine[] = {{0, 10}, {12, 14}, {15, 20}};
    /* rank 0's ends 8, 12, 15 (this clock runs 2 ahead), but the third seen 3 late here */
    cr_expect_float_eq(zl_clock_offset_ms(mine, (double[]){8, 12, 15}, 3, scratch), 2, 1e-12);
    cr_expect_float_eq(zl_clock_offset_ms(mine, (double[]){8, 11}, 2, scratch), 2.5, 1e-12); /* two: their mean */
    zl_interval iv[4];
    double w, ew;
    /* last joins: 4 (wait [0,4)), 11 (before this start: none), 25 (past the end: the whole [15,20));
     * exposed [2,6) and [16,17) -> exposed wait 2 + 1 */
    zl_join_wait_ms(mine, (double[]){4, 11, 25}, 3, (zl_interval[]){{2, 6}, {16, 17}}, 2, iv, &w, &ew);
    cr_expect_float_eq(w, 4 + 0 + 5, 1e-12);
    cr_expect_float_eq(ew, 2 + 1, 1e-12);
    /* overlapping collectives wait once: [0,10) and [1,5) both waiting until 6 -> [0,6) */
    zl_join_wait_ms((zl_interval[]){{0, 10}, {1, 5}}, (double[]){6, 6}, 2, NULL, 0, iv, &w, &ew);
    cr_expect_float_eq(w, 6, 1e-12);
    cr_expect_float_eq(ew, 0, 1e-12);
}

/* ---- gemm_table: the ZL_GEMM_TABLE file (common/gemm_table.h) ---------------------------- */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

#define TABLE_HEAD "{\"format\": \"zerolab gemm table 1\", \"gpu\": \"NVIDIA H200\", \"cublaslt_version\": 130100, "
#define DH "{\"what\": \"bwd dh\", \"m\": 16384, \"n\": 8192, \"k\": 4096, \"transa\": \"T\", " \
           "\"transb\": \"N\", \"epilogue\": 192, \"dtype\": \"fp16\", \"algo\": {\"id\": 39, \"tile\": 20, " \
           "\"stages\": 35, \"splitk\": 1, \"reduction\": 0, \"swizzle\": 1, \"custom\": 0, \"inner\": 0, " \
           "\"cluster\": 3}, \"first_ms\": 1.85, \"ms\": 1.776}"

/* A table as the benchmark writes it loads field by field; find matches the whole key and
 * nothing else; save then load gives the same table back. */
Test(gemm_table, loads_finds_and_saves) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/zl_gemm_table_%d.json", getpid());
    write_text(path, TABLE_HEAD "\"made_by\": \"bench\", \"gemms\": [" DH "]}");
    zl_gemm_table t;
    char err[512];
    cr_assert_eq(zl_gemm_table_load(path, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.n, 1);
    cr_expect_str_eq(t.gpu, "NVIDIA H200");
    cr_expect_eq(t.cublaslt_version, 130100);
    const zl_gemm_entry *e = &t.e[0];
    cr_expect_str_eq(e->what, "bwd dh");
    cr_expect(e->shape.m == 16384 && e->shape.n == 8192 && e->shape.k == 4096 && e->shape.transa == 1 &&
              e->shape.transb == 0 && e->shape.epilogue == 192 && e->shape.bf16 == 0);
    cr_expect(e->algo.id == 39 && e->algo.tile == 20 && e->algo.stages == 35 && e->algo.splitk == 1 &&
              e->algo.reduction == 0 && e->algo.swizzle == 1 && e->algo.custom == 0 && e->algo.inner == 0 &&
              e->algo.cluster == 3);
    cr_expect(e->first_ms == 1.85 && e->ms == 1.776);
    zl_gemm_shape key = e->shape;
    cr_expect_eq(zl_gemm_table_find(&t, &key), e);
    key.bf16 = 1; /* any field of the key differs: none */
    cr_expect_null(zl_gemm_table_find(&t, &key));
    key = e->shape, key.epilogue = 0;
    cr_expect_null(zl_gemm_table_find(&t, &key));
    key = e->shape, key.transb = 1;
    cr_expect_null(zl_gemm_table_find(&t, &key));
    cr_expect_null(zl_gemm_table_find(NULL, &e->shape));
    cr_expect(zl_gemm_table_matches(&t, "NVIDIA H200", 130100)); /* used only where it was made */
    cr_expect(!zl_gemm_table_matches(&t, "NVIDIA H100 80GB HBM3", 130100));
    cr_expect(!zl_gemm_table_matches(&t, "NVIDIA H200", 130200));
    cr_expect(!zl_gemm_table_matches(&t, "NVIDIA H20", 130100));
    cr_assert_eq(zl_gemm_table_save(path, &t, err, sizeof err), 0, "%s", err);
    zl_gemm_table u;
    cr_assert_eq(zl_gemm_table_load(path, &u, err, sizeof err), 0, "%s", err);
    cr_expect(u.n == 1 && !memcmp(&u.e[0].shape, &e->shape, sizeof e->shape) &&
              !memcmp(&u.e[0].algo, &e->algo, sizeof e->algo) && !strcmp(u.made_by, "bench"));
    zl_gemm_table_free(&t), zl_gemm_table_free(&u);
    unlink(path);
}

/* What is wrong with a table is said, with the entry it is in. */
Test(gemm_table, refuses_what_it_cannot_use) {
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"not json", "is not one JSON value"},
        {TABLE_HEAD "\"gemms\": []} {}", "is not one JSON value"}, /* something after the table */
        {TABLE_HEAD "\"gemms\": [{\"what\": \"small\", \"m\": 1024, \"n\": 1023, \"k\": 8, \"transa\": \"N\", "
         "\"transb\": \"N\", \"epilogue\": 1, \"dtype\": \"fp16\"}]}",
         "gemms[0] (small): 1024 x 1023 outputs, fewer than the 1048576"},
        {TABLE_HEAD "\"gemms\": [{\"m\": 1e20, \"n\": 1, \"k\": 1}]}", "gemms[0]: want m, n, k"},
        {"{\"format\": \"zerolab gemm table 2\"}", "want \"format\": \"zerolab gemm table 1\""},
        {TABLE_HEAD "\"gemms\": {}}", "\"gemms\" (a list)"},
        {"{\"format\": \"zerolab gemm table 1\", \"gpu\": \"x\", \"cublaslt_version\": 1.5, \"gemms\": []}",
         "\"cublaslt_version\" (a number)"},
        {TABLE_HEAD "\"gemms\": [{\"m\": 1}]}", "gemms[0]: want m, n, k"},
        {TABLE_HEAD "\"gemms\": [" DH ", " DH "]}", "gemms[0] and gemms[1] are the same GEMM"},
    };
    char path[64], err[512];
    snprintf(path, sizeof path, "/tmp/zl_gemm_table_bad_%d.json", getpid());
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i].text);
        zl_gemm_table t;
        cr_expect_eq(zl_gemm_table_load(path, &t, err, sizeof err), -1, "case %zu loaded", i);
        cr_expect(strstr(err, bad[i].why) != NULL, "case %zu: '%s' lacks '%s'", i, err, bad[i].why);
    }
    /* an algorithm missing a field, a transpose that is neither N nor T */
    char text[2048];
    snprintf(text, sizeof text, TABLE_HEAD "\"gemms\": [%s]}", DH);
    char *c = strstr(text, "\"cluster\": 3"), *t = strstr(text, "\"transa\": \"T\"");
    memcpy(c, "\"clustex\"", 9);
    write_text(path, text);
    zl_gemm_table tb;
    cr_expect_eq(zl_gemm_table_load(path, &tb, err, sizeof err), -1);
    cr_expect(strstr(err, "gemms[0] (bwd dh): want algo {id, tile"), "%s", err);
    memcpy(c, "\"cluster\"", 9), t[11] = 'X';
    write_text(path, text);
    cr_expect_eq(zl_gemm_table_load(path, &tb, err, sizeof err), -1);
    cr_expect(strstr(err, "transa and transb (\"N\" or \"T\")"), "%s", err);
    unlink(path);
    cr_expect_eq(zl_gemm_table_load(path, &tb, err, sizeof err), -1);
    cr_expect(strstr(err, "cannot open"), "%s", err);
}

/* The tables committed under tables/ (PRESET-GPU.json, the name scripts/bench-gpu.sh looks for):
 * each loads, was made on the GPU its name says (bench-gpu.sh takes the first "H" and three digits
 * of nvidia-smi's name; the trainer refuses a table from another GPU, so a misnamed one would
 * silently go unused), and every entry is one of its preset's block GEMMs: for the MLP, m, n and k
 * are D, 4D and the rows per rank in some order (taken here from args.c's preset, not the table). */
Test(gemm_table, the_committed_tables_load_and_fit_their_names) {
    DIR *d = opendir("tables");
    cr_assert_not_null(d, "run from the repository root: no tables/");
    int seen = 0;
    for (struct dirent *f; (f = readdir(d));) {
        size_t len = strlen(f->d_name);
        if (len < 6 || strcmp(f->d_name + len - 5, ".json")) continue;
        char name[256], path[512], err[512];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), f->d_name);
        snprintf(path, sizeof path, "tables/%s", f->d_name);
        char *dash = strrchr(name, '-');
        cr_assert_not_null(dash, "%s: want PRESET-GPU.json", path);
        *dash = '\0';
        const char *gpu = dash + 1, *preset = name;
        zl_gemm_table t;
        cr_assert_eq(zl_gemm_table_load(path, &t, err, sizeof err), 0, "%s", err);
        const char *h = strchr(t.gpu, 'H');
        while (h && !(isdigit((unsigned char)h[1]) && isdigit((unsigned char)h[2]) && isdigit((unsigned char)h[3])))
            h = strchr(h + 1, 'H');
        cr_assert_not_null(h, "%s: made on '%s', no H and three digits in it", path, t.gpu);
        cr_expect(tolower((unsigned char)h[0]) == gpu[0] && !strncmp(h + 1, gpu + 1, 3) && strlen(gpu) == 4,
                  "%s: named for '%s', made on '%s'", path, gpu, t.gpu);
        zl_config c;
        char line[300];
        snprintf(line, sizeof line, "--preset %s", preset);
        cr_assert_eq(parse(0, err, &c, line), ZL_ARGS_OK, "%s: %s", path, err);
        cr_assert_eq(c.model, ZL_MODEL_MLP, "%s: a GPT preset's GEMMs need their own shapes here", path);
        cr_expect_gt(t.n, 0, "%s: no entries", path);
        for (int i = 0; i < t.n; i++) {
            const zl_gemm_shape *s = &t.e[i].shape;
            long long want[3] = {c.dim, 4LL * c.dim, c.batch}, got[3] = {s->m, s->n, s->k};
            int used[3] = {0, 0, 0}, matched = 0;
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    if (!used[b] && got[a] == want[b]) { used[b] = 1, matched++; break; }
            cr_expect_eq(matched, 3, "%s: gemms[%d] (%s) is %d x %d x %d, not a GEMM of %s (D = %d, rows %d)", path,
                         i, t.e[i].what, s->m, s->n, s->k, preset, c.dim, c.batch);
        }
        zl_gemm_table_free(&t);
        seen++;
    }
    closedir(d);
    cr_expect_gt(seen, 0, "no tables/*.json");
}

/* ---- throughput: model FLOPs per token and MFU (PaLM's convention) ---------------- */

/* GPT-2 small by hand: wte 50304·768 (50257 padded to a multiple of 64) + wpe 1024·768 +
 * 12 blocks of 12·768² + 13·768 + the final LayerNorm 2·768 = 124,475,904 parameters;
 * per token 6Ψ = 746,855,424 plus attention 12·L·T·D = 12·12·1024·768 = 113,246,208. */
Test(throughput, gpt2_124m_flops_per_token_by_hand) {
    zl_config c;
    char err[256];
    cr_assert_eq(parse(0, err, &c, "--preset gpt2-124m --batch 4 --accum 2"), ZL_ARGS_OK, "%s", err);
    zl_model_shape s = zl_model_shape_of(&c);
    double psi = (double)zl_model_unit_offset(s, zl_model_n_units(s));
    cr_assert_eq(psi, 124475904.0);
    zl_throughput t = zl_throughput_of(&c, psi, 500.0, "host"); /* 0.5 s per step */
    cr_expect_eq(t.attention_flops_per_token, 113246208.0);
    cr_expect_eq(t.flops_per_token, 746855424.0 + 113246208.0);
    cr_expect_eq(t.tokens_per_step, 2 * 4 * 1024.0); /* K·B·T per rank */
    cr_expect_float_eq(t.tokens_per_s, 16384.0, 1e-9);
    cr_expect_float_eq(t.tflops, 860101632.0 * 16384.0 / 1e12, 1e-9);
    cr_expect(isnan(t.mfu) && t.peak_tflops == 0 && t.peak_source == NULL, "the CPU has no known peak");
    cr_assert_eq(parse(0, err, &c, "--preset gpt2-124m --batch 4 --accum 2 --peak-tflops 100"), ZL_ARGS_OK, "%s", err);
    t = zl_throughput_of(&c, psi, 500.0, "NVIDIA H100 80GB HBM3"); /* the flag wins over the name */
    cr_expect_float_eq(t.mfu, 860101632.0 * 16384.0 / 1e12 / 100.0, 1e-12);
    cr_expect_str_eq(t.peak_source, "--peak-tflops");
}

/* Only the SXM parts, by the names cudaGetDeviceProperties gives; anything else is unknown. */
Test(throughput, peak_known_only_for_h100_and_h200_sxm) {
    const struct {
        const char *name;
        double peak;
    } cases[] = {{"NVIDIA H100 80GB HBM3", 989}, {"NVIDIA H200", 989},    {"NVIDIA H100 PCIe", 0},
                 {"NVIDIA H100 NVL", 0},         {"NVIDIA H200 NVL", 0}, {"NVIDIA A100-SXM4-80GB", 0},
                 {"host", 0},                    {"", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *family;
        double p = zl_known_peak_tflops(cases[i].name, &family);
        cr_expect_eq(p, cases[i].peak, "'%s': %g, expected %g", cases[i].name, p, cases[i].peak);
        cr_expect_eq(family != NULL, cases[i].peak > 0, "'%s': family %s", cases[i].name, family ? family : "NULL");
    }
}

/* ---- replace: a file written whole or not at all ------------------------------------ */

static void put_text(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(text, f) >= 0 && !fclose(f), "%s: %s", path, strerror(errno));
    cr_assert_eq(chmod(path, mode), 0);
}

static int text_is(const char *path, const char *want) {
    char got[64] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f) fclose(f);
    got[n] = '\0';
    return !strcmp(got, want);
}

/* Through a link, the file it names is replaced (the link stays a link) and keeps its mode; a
 * killed writer's leftover PATH.zl-tmp is replaced too; until the commit the earlier file is as
 * it was, and after it no .zl-tmp is left. */
Test(replace, a_commit_replaces_the_file_a_link_names_keeping_its_mode) {
    char dir[64], file[96], link[96], tmp[128];
    snprintf(dir, sizeof dir, "/tmp/zl_replace_%d", getpid());
    snprintf(file, sizeof file, "%s/file", dir), snprintf(link, sizeof link, "%s/link", dir);
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", file);
    cr_assert(!mkdir(dir, 0700) || errno == EEXIST);
    put_text(file, "old", 0640);
    put_text(tmp, "a killed writer's", 0600);
    unlink(link);
    cr_assert_eq(symlink(file, link), 0);
    zl_replace r;
    cr_assert_eq(zl_replace_resolve(&r, link), 0);
    cr_expect(r.replaces && r.mode == 0640 && !strcmp(strrchr(r.target, '/'), "/file"), "target %s", r.target);
    cr_assert_eq(zl_replace_begin(&r), 0);
    cr_expect(fputs("new", r.f) >= 0);
    fflush(r.f);
    cr_expect(text_is(file, "old"), "the file changed before the commit");
    cr_assert_eq(zl_replace_commit(&r, NULL), 0);
    struct stat st;
    cr_expect(text_is(file, "new"));
    cr_expect(!lstat(link, &st) && S_ISLNK(st.st_mode), "the link is no longer a link");
    cr_expect(!stat(file, &st) && (st.st_mode & 07777) == 0640, "mode %o", (unsigned)(st.st_mode & 07777));
    cr_expect(access(tmp, F_OK) && errno == ENOENT, "%s left behind", tmp);
    /* discarded: the file as it was, nothing left */
    cr_assert_eq(zl_replace_resolve(&r, file), 0);
    cr_assert_eq(zl_replace_begin(&r), 0);
    cr_expect(fputs("abandoned", r.f) >= 0);
    zl_replace_discard(&r);
    cr_expect(text_is(file, "new"), "a discarded write changed the file");
    cr_expect(access(tmp, F_OK) && errno == ENOENT, "%s left behind", tmp);
    /* a new file: the umask's mode */
    char fresh[96];
    snprintf(fresh, sizeof fresh, "%s/fresh", dir);
    unlink(fresh);
    mode_t um = umask(022);
    cr_assert_eq(zl_replace_resolve(&r, fresh), 0);
    cr_expect(!r.replaces);
    cr_assert_eq(zl_replace_begin(&r), 0);
    cr_assert_eq(zl_replace_commit(&r, NULL), 0);
    umask(um);
    cr_expect(!stat(fresh, &st) && (st.st_mode & 07777) == 0644, "mode %o", (unsigned)(st.st_mode & 07777));
    unlink(fresh), unlink(link), unlink(file), rmdir(dir);
}

/* What cannot be replaced is said before anything is created: a directory (or a path ending in
 * '/'), a socket, a new name in a missing directory, a link to nothing; and a PATH.zl-tmp that
 * is not a regular file is left alone (begin fails). A character device is written in place
 * (direct): /dev/null takes it, /dev/full fails the commit with ENOSPC, both stay devices. */
Test(replace, refuses_what_it_cannot_replace) {
    char dir[64], path[128], tmp[140];
    snprintf(dir, sizeof dir, "/tmp/zl_replace_no_%d", getpid());
    cr_assert(!mkdir(dir, 0700) || errno == EEXIST);
    zl_replace r;
    cr_expect_eq(zl_replace_resolve(&r, dir), EISDIR);
    snprintf(path, sizeof path, "%s/", dir);
    cr_expect_eq(zl_replace_resolve(&r, path), EISDIR);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sock", dir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof sa), "socket: %s", strerror(errno));
    cr_expect_eq(zl_replace_resolve(&r, sa.sun_path), EINVAL);
    close(fd), unlink(sa.sun_path);
    const char *const dev[2] = {"/dev/null", "/dev/full"};
    for (int i = 0; i < 2; i++) {
        struct stat ds;
        if (stat(dev[i], &ds) || !S_ISCHR(ds.st_mode)) continue; /* not a character device here */
        cr_assert_eq(zl_replace_resolve(&r, dev[i]), 0);
        cr_expect(r.direct && !r.tmp[0], "%s: not written in place", dev[i]);
        cr_assert_eq(zl_replace_begin(&r), 0);
        cr_expect(fputs("x", r.f) >= 0);
        cr_expect_eq(zl_replace_commit(&r, NULL), i ? ENOSPC : 0, "%s", dev[i]);
        cr_expect(!stat(dev[i], &ds) && S_ISCHR(ds.st_mode), "%s is no longer a character device", dev[i]);
    }
    snprintf(path, sizeof path, "%s/no/such", dir);
    cr_expect_eq(zl_replace_resolve(&r, path), ENOENT);
    snprintf(path, sizeof path, "%s/dangling", dir);
    unlink(path);
    cr_assert_eq(symlink("/nonexistent/zl", path), 0);
    cr_expect_eq(zl_replace_resolve(&r, path), ENOENT);
    unlink(path);
    snprintf(path, sizeof path, "%s/f", dir);
    snprintf(tmp, sizeof tmp, "%s.zl-tmp", path);
    put_text(path, "kept", 0644);
    cr_assert_eq(mkdir(tmp, 0700), 0);
    cr_assert_eq(zl_replace_resolve(&r, path), 0);
    cr_expect_eq(zl_replace_begin(&r), EEXIST);
    struct stat st;
    cr_expect(!stat(tmp, &st) && S_ISDIR(st.st_mode), "the directory named PATH.zl-tmp was touched");
    cr_expect(text_is(path, "kept"));
    rmdir(tmp), unlink(path), rmdir(dir);
}

/* zl_median (the report's median step, the pinned-copy bench's loaded copies): the middle value
 * of an odd count, the mean of the two middle ones of an even count, whatever the order. */
Test(util, median_odd_and_even) {
    double odd[] = {3.0, 1.0, 7.0, 2.0, 5.0}, even[] = {4.0, 1.0, 3.0, 2.0}, one[] = {9.5};
    cr_expect_eq(zl_median(odd, 5), 3.0);
    cr_expect_eq(zl_median(even, 4), 2.5);
    cr_expect_eq(zl_median(one, 1), 9.5);
}

/* zl_clock_summarize (the report's clocks): five readings worked out by hand — the median SM
 * clock and power of an unsorted set, their extremes, the hottest reading, the limit in force at
 * the end, and each reason's share counted bit by bit (0x4 alone is the power cap; 0x20 and 0x40
 * are thermal; 0x8 and 0x80 HW slowdown; 0x1, idle, is none of them). */
Test(clocks, summary_of_five_readings_by_hand) {
    const zl_clock_reading r[] = {
        {.sm_mhz = 1980, .power_w = 120, .power_limit_w = 700, .temp_c = 40, .reasons = 0x1},
        {.sm_mhz = 1440, .power_w = 690, .power_limit_w = 700, .temp_c = 61, .reasons = 0x4},
        {.sm_mhz = 1230, .power_w = 699, .power_limit_w = 700, .temp_c = 63, .reasons = 0x4 | 0x20},
        {.sm_mhz = 1410, .power_w = 688, .power_limit_w = 700, .temp_c = 62, .reasons = 0x80},
        {.sm_mhz = 1470, .power_w = 650, .power_limit_w = 650, .temp_c = 60, .reasons = 0x40 | 0x8},
    };
    zl_clock_summary s = zl_clock_summarize(r, 5);
    cr_expect_eq(s.readings, 5);
    cr_expect_eq(s.sm_mhz_median, 1440); /* sorted: 1230 1410 1440 1470 1980 */
    cr_expect_eq(s.sm_mhz_min, 1230);
    cr_expect_eq(s.sm_mhz_max, 1980);
    cr_expect_eq(s.power_w_median, 688); /* sorted: 120 650 688 690 699 */
    cr_expect_eq(s.power_limit_w, 650);
    cr_expect_eq(s.temp_c_max, 63);
    cr_expect_float_eq(s.power_cap, 2 / 5.0, 1e-15);
    cr_expect_float_eq(s.thermal, 2 / 5.0, 1e-15);
    cr_expect_float_eq(s.hw_slowdown, 2 / 5.0, 1e-15);
    /* the readings themselves are not reordered */
    cr_expect_eq(r[0].sm_mhz, 1980);
}

/* Summarizing a reader that never started (a run of one step; the CPU backend before step 2):
 * no readings, and a reason to print. */
Test(clocks, stop_without_start_says_why) {
    zl_clock_summary s = zl_clocks_summary();
    cr_expect_eq(s.readings, 0);
    cr_expect(strlen(s.why) > 0);
}

/* On the CPU backend a started reader gets no reading and keeps the backend's reason. */
Test(clocks, cpu_backend_has_none_and_says_so) {
    zl_clocks_start();
    zl_clocks_end(3);
    zl_clock_summary s = zl_clocks_summary();
    cr_expect_eq(s.readings, 0);
    cr_expect_str_eq(s.why, "the CPU backend has no GPU clocks");
}

/* The reader thread on the CPU backend's test sequence (ZL_TEST_CLOCKS=1: reading k has SM
 * 1400 + 15·(k mod 5) MHz, 690 W of 700, the power cap on even k, an energy counter at 13.8·k J
 * read at 0.020·k s): about 120 ms at one reading per 20 ms and a last one at the end, then the
 * summary against the same sequence's n readings worked out here. */
Test(clocks, the_reader_thread_on_a_known_sequence) {
    setenv("ZL_TEST_CLOCKS", "1", 1);
    zl_clocks_start();
    nanosleep(&(struct timespec){0, 120 * 1000000L}, NULL);
    zl_clocks_end(6); /* as if 6 steps had run since the start */
    zl_clocks_end(1); /* a second end is nothing */
    zl_clock_summary s = zl_clocks_summary();
    unsetenv("ZL_TEST_CLOCKS");
    int n = s.readings;
    /* the first at the start, one a period, the last at the end */
    cr_assert(n >= 3 && n <= 9, "%d readings in 120 ms at one per %d ms", n, ZL_CLOCK_PERIOD_MS);
    double sm[9];
    int capped = 0;
    for (int k = 0; k < n; k++) sm[k] = 1400 + 15 * (k % 5), capped += k % 2 == 0;
    for (int i = 0; i < n; i++) /* insertion sort: the reference median, not zl_median */
        for (int j = i; j > 0 && sm[j - 1] > sm[j]; j--) {
            double t = sm[j];
            sm[j] = sm[j - 1], sm[j - 1] = t;
        }
    double median = n % 2 ? sm[n / 2] : (sm[n / 2 - 1] + sm[n / 2]) / 2;
    cr_expect_eq(s.sm_mhz_median, median, "n = %d: median %g, expected %g", n, s.sm_mhz_median, median);
    cr_expect_eq(s.sm_mhz_min, sm[0]);
    cr_expect_eq(s.sm_mhz_max, sm[n - 1]);
    cr_expect_eq(s.power_w_median, 690);
    cr_expect_eq(s.power_limit_w, 700);
    cr_expect_float_eq(s.power_cap, (double)capped / n, 1e-15);
    /* the counter moves 13.8 J at every reading, 20 ms apart: 690 W over the n - 1 periods, 6 steps */
    cr_expect_eq(s.energy_updates, n - 1);
    cr_expect_float_eq(s.energy_w, 690, 1e-9, "n = %d: %g W", n, s.energy_w);
    cr_expect_float_eq(s.energy_j, 13.8 * (n - 1), 1e-9, "n = %d: %g J", n, s.energy_j);
    cr_expect_eq(s.energy_steps, 6);
    cr_expect_str_eq(s.why, "", "reading stopped early: %s", s.why);
}

/* A counter that moves every 100 ms, read every 20 ms (as on an H200): readings at 0.02·j s,
 * j = 0..43, a counter of 5000 J + 700 W · u at its moves u = 0.1·m + 0.01 s. The moves happen
 * half-way between two readings, so their times and the power are exact: 700 W over the readings'
 * 0.86 s is 602 J, where the rise from the first reading to the last (4937 to 5567 J) is 630. */
Test(clocks, energy_from_the_counters_moves) {
    zl_clock_reading r[44];
    for (int j = 0; j < 44; j++) {
        double t = 0.02 * j, u = floor((t - 0.01) / 0.1 + 1e-9) * 0.1 + 0.01; /* the last move at or before t */
        r[j] = (zl_clock_reading){.sm_mhz = 1410, .power_w = 690, .power_limit_w = 700, .energy_j = 5000 + 700 * u, .t_s = t};
    }
    zl_clock_summary s = zl_clock_summarize(r, 44);
    cr_expect_eq(s.energy_updates, 9, "moves at 0.01, 0.11, ..., 0.81 s");
    cr_expect_float_eq(s.energy_w, 700, 1e-9);
    cr_expect_float_eq(s.energy_j, 602, 1e-9);
    cr_expect_float_eq(r[43].energy_j - r[0].energy_j, 630, 1e-9, "the rise end to end, which the summary is not");
}

/* Too few moves to time, no counter, or a counter that went back (a driver reload between
 * readings): no energy; the moves are counted where there is a counter. */
Test(clocks, energy_needs_two_moves_of_one_counter) {
    zl_clock_reading r[3] = {
        {.sm_mhz = 1410, .power_w = 690, .power_limit_w = 700, .energy_j = 5000.25, .t_s = 1.00},
        {.sm_mhz = 1425, .power_w = 695, .power_limit_w = 700, .energy_j = 5010.0, .t_s = 1.02},
        {.sm_mhz = 1440, .power_w = 699, .power_limit_w = 700, .energy_j = 5069.0, .t_s = 1.04},
    };
    zl_clock_summary s = zl_clock_summarize(r, 3); /* moves at 1.01 and 1.03 s: 59 J in 0.02 s */
    cr_expect_eq(s.energy_updates, 2);
    cr_expect_float_eq(s.energy_w, 2950, 1e-6);
    cr_expect_float_eq(s.energy_j, 118, 1e-9);
    s = zl_clock_summarize(r, 2);
    cr_expect_eq(s.energy_updates, 1);
    cr_expect_lt(s.energy_j, 0);
    cr_expect_lt(s.energy_w, 0);
    r[1].energy_j = 5000.25; /* no move at 1.02 s: one move in three readings */
    cr_expect_eq(zl_clock_summarize(r, 3).energy_updates, 1);
    cr_expect_lt(zl_clock_summarize(r, 3).energy_j, 0);
    r[2].energy_j = -1;
    cr_expect_eq(zl_clock_summarize(r, 3).energy_updates, -1);
    cr_expect_lt(zl_clock_summarize(r, 3).energy_j, 0);
    r[2].energy_j = 12.0;
    cr_expect_eq(zl_clock_summarize(r, 3).energy_updates, -1);
    r[0].energy_j = -1;
    cr_expect_eq(zl_clock_summarize(r, 3).energy_updates, -1);
}

/* --check's comparison: a memory number one byte off its formula is a mismatch at any size (a
 * relative tolerance of 1e-9 once let lab-1b's 17 GB of model states be 17 bytes off); bytes a
 * step are doubles (means of (N-1)/N·S terms) and may differ in far less than a byte. */
Test(check, one_byte_is_a_mismatch_at_any_size) {
    double sizes[] = {1, 4096, 1003632000, 17182490624.0, 1e15};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        double f = sizes[i];
        cr_expect(zl_check_equal(1, f, f), "%.0f", f);
        cr_expect(!zl_check_equal(1, f, f + 1), "memory %.0f vs %.0f passed", f, f + 1);
        cr_expect(!zl_check_equal(0, f, f + 1), "bytes a step %.0f vs %.0f passed", f, f + 1);
    }
    cr_expect(zl_check_equal(0, 232.0, 2 * 174 * (2.0 / 3.0)), "the same bytes in another order of doubles");
    cr_expect(zl_check_equal(0, 4.5e10 + 3e-6, 4.5e10), "a double's rounding at 45 GB a step");
    cr_expect(!zl_check_equal(0, 261.0, 232.0));
}
