/* test_host_adam.c — the vectorised host Adam (kernels/cpu/adam_host.c) against the CPU
 * reference zl_cpu_adam_update, bit for bit, and its 16-bit conversions against zl_math.h's:
 * widening over all 65,536 values of each format, rounding over a dense set of floats (every
 * representable value, every midpoint between neighbours and the floats either side of it,
 * every float with an all-ones exponent — infinities and every NaN — and random bit patterns).
 * Lengths are odd (the scalar tail), pointers unaligned, and the update also runs in place
 * (param == grad, as offload.c calls it). bench/host_adam.c --verify-all checks rounding on
 * all 2^32 floats. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels/cpu/adam_host.h"
#include "common/offload.h" /* zl_offload_threads */

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t next_u64(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)((next_u64() >> 40) * 0x1p-24); }

static void set_format(int bf16) { cr_assert_eq(zl_kernels_set_dtype(bf16 ? ZL_BF16 : ZL_F16), 0); }

/* The vector path must be the one under test wherever the CPU has it; else this file would
 * compare the reference with itself. */
Test(host_adam, vector_path_runs_where_the_cpu_has_it) {
    int avx2 = __builtin_cpu_supports("avx2"), f16c = __builtin_cpu_supports("f16c");
    set_format(0);
    cr_assert_str_eq(zl_host_simd_name(), avx2 && f16c ? "avx2+f16c" : "scalar");
    set_format(1);
    cr_assert_str_eq(zl_host_simd_name(), avx2 ? "avx2" : "scalar");
}

/* ---- conversions --------------------------------------------------------------------- */

static void check_widen_all(int bf16) {
    set_format(bf16);
    enum { N = 65536 + 3 }; /* + 3: the tail runs the scalar code */
    zl_half *h = malloc(N * sizeof *h);
    float *got = malloc(N * sizeof *got);
    for (uint32_t i = 0; i < N; i++) h[i] = (zl_half)(i & 0xffff);
    zl_host_widen_array(got, h, N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t want = zl_f32_bits(zl_widen_storage(h[i], bf16)), have = zl_f32_bits(got[i]);
        cr_assert_eq(have, want, "%s widen 0x%04x: 0x%08x, reference 0x%08x", bf16 ? "bf16" : "fp16", h[i], have, want);
    }
    free(h), free(got);
}
Test(host_adam, widen_fp16_every_value) { check_widen_all(0); }
Test(host_adam, widen_bf16_every_value) { check_widen_all(1); }

typedef struct {
    uint32_t *bits;
    size_t n, cap;
} bitset_list;
static void push(bitset_list *l, uint32_t x) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1 << 20;
        l->bits = realloc(l->bits, l->cap * sizeof *l->bits);
        cr_assert_not_null(l->bits);
    }
    l->bits[l->n++] = x;
}
static void push_around(bitset_list *l, float f) { /* f and the floats either side of it */
    push(l, zl_f32_bits(f));
    push(l, zl_f32_bits(nextafterf(f, INFINITY)));
    push(l, zl_f32_bits(nextafterf(f, -INFINITY)));
}

/* Every float a 16-bit value can round from, densely: each representable value, each
 * midpoint between neighbours (a tie; exact in float) and the floats next to those, the
 * underflow and overflow boundaries, every float with an all-ones exponent, random bits. */
static bitset_list dense_floats(int bf16) {
    bitset_list l = {0};
    for (uint32_t s = 0; s < 2; s++) {
        uint32_t top = bf16 ? 0x7f80u : 0x7c00u; /* +inf's pattern */
        for (uint32_t h = 0; h < top; h++) {
            zl_half a = (zl_half)(h | s << 15), b = (zl_half)((h + 1) | s << 15);
            double fa = zl_widen_storage(a, bf16), fb = zl_widen_storage(b, bf16);
            push_around(&l, (float)fa);
            push_around(&l, (float)((fa + fb) / 2)); /* one more bit than the format: exact */
        }
        float tiny = bf16 ? 0x1p-134f : 0x1p-25f; /* half the smallest subnormal: a tie to 0 */
        push_around(&l, s ? -tiny : tiny);
    }
    for (uint32_t m = 0; m < (1u << 24); m++) push(&l, 0x7f800000u | (m & 0x7fffffu) | (m >> 23) << 31);
    for (int i = 0; i < (1 << 20); i++) push(&l, (uint32_t)next_u64());
    for (int i = 0; i < 4096; i++) push(&l, (uint32_t)next_u64() & 0x807fffffu); /* float subnormals */
    for (int i = 0; i < 5; i++) push(&l, (uint32_t)i); /* a tail */
    return l;
}

static void check_round_dense(int bf16) {
    set_format(bf16);
    bitset_list l = dense_floats(bf16);
    float *f = malloc(l.n * sizeof *f);
    zl_half *got = malloc(l.n * sizeof *got);
    for (size_t i = 0; i < l.n; i++) f[i] = zl_bits_f32(l.bits[i]);
    zl_host_round_array(got, f, l.n);
    for (size_t i = 0; i < l.n; i++) {
        zl_half want = zl_round_storage(f[i], bf16);
        cr_assert_eq(got[i], want, "%s round 0x%08x: 0x%04x, reference 0x%04x", bf16 ? "bf16" : "fp16", l.bits[i],
                     got[i], want);
    }
    cr_assert_gt(l.n, (size_t)(1 << 24), "the dense set is dense");
    free(l.bits), free(f), free(got);
}
Test(host_adam, round_fp16_dense_floats_ties_nans) { check_round_dense(0); }
Test(host_adam, round_bf16_dense_floats_ties_nans) { check_round_dense(1); }

/* ---- the update ------------------------------------------------------------------------ */

typedef struct {
    float *master, *m, *v;
    zl_half *param, *grad;
} adam_state;

/* The arrays start g_skew elements past malloc's alignment (1 unless a test sets it), so the
 * vector loads and stores are unaligned. */
static size_t g_skew = 1;
static adam_state state_alloc(size_t n) {
    size_t k = g_skew;
    adam_state s = {malloc((n + k) * 4), malloc((n + k) * 4), malloc((n + k) * 4), malloc((n + k) * 2),
                    malloc((n + k) * 2)};
    cr_assert(s.master && s.m && s.v && s.param && s.grad);
    s.master += k, s.m += k, s.v += k, s.param += k, s.grad += k;
    return s;
}
static void state_copy(adam_state *d, const adam_state *s, size_t n) {
    memcpy(d->master, s->master, n * 4), memcpy(d->m, s->m, n * 4), memcpy(d->v, s->v, n * 4);
    memcpy(d->param, s->param, n * 2), memcpy(d->grad, s->grad, n * 2);
}
static void state_free(adam_state *s) {
    size_t k = g_skew;
    free(s->master - k), free(s->m - k), free(s->v - k), free(s->param - k), free(s->grad - k);
}

/* Is this stored value a NaN (4 bytes: float; 2 bytes: the 16-bit format)? */
static int is_nan_bits(uint32_t u, size_t width, int bf16) {
    if (width == 4) return (u & 0x7fffffffu) > 0x7f800000u;
    return (u & 0x7fffu) > (bf16 ? 0x7f80u : 0x7c00u);
}

/* Every bit equal — except that where both are NaN the payloads may differ: when two NaNs
 * with different payloads meet (a NaN gradient and the default NaN of inf - inf, say), x86
 * returns the first operand's, and which operand of a commutative add or multiply comes
 * first is the compiler's choice, not C's (GCC reorders them: swapping the operands in the
 * vector source changed no payload here; a GPU returns one canonical NaN). Finite results
 * and NaN-ness are bitwise. Returns how many NaN pairs differed. */
static size_t assert_same_bits(const char *what, const void *a, const void *b, size_t n, size_t width, int bf16,
                               const char *ctx) {
    const unsigned char *x = a, *y = b;
    size_t nan_payloads = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(x + i * width, y + i * width, width) == 0) continue;
        uint32_t u = 0, w = 0;
        memcpy(&u, x + i * width, width), memcpy(&w, y + i * width, width);
        if (is_nan_bits(u, width, bf16) && is_nan_bits(w, width, bf16)) {
            nan_payloads++;
            continue;
        }
        cr_assert_fail("%s: %s[%zu] = 0x%08x, reference 0x%08x", ctx, what, i, u, w);
    }
    return nan_payloads;
}

/* Run both updates from the same state (separately, or in place: param == grad) and compare
 * every output bit. Two steps: the second starts from the first's m, v and master. */
static size_t check_update(const adam_state *init, size_t n, float grad_mult, int t, zl_adam_hparams hp,
                           int in_place, int bf16) {
    size_t nan_payloads = 0;
    adam_state a = state_alloc(n), r = state_alloc(n);
    state_copy(&a, init, n), state_copy(&r, init, n);
    char ctx[160];
    for (int step = 0; step < 2; step++) {
        zl_half *pa = in_place ? a.grad : a.param, *pr = in_place ? r.grad : r.param;
        zl_host_adam_update(a.master, a.m, a.v, pa, a.grad, n, grad_mult, t + step, hp);
        zl_cpu_adam_update(r.master, r.m, r.v, pr, r.grad, n, grad_mult, t + step, hp);
        snprintf(ctx, sizeof ctx, "%s n=%zu t=%d grad_mult=%g wd=%g%s", bf16 ? "bf16" : "fp16", n, t + step,
                 (double)grad_mult, (double)hp.weight_decay, in_place ? " in place" : "");
        nan_payloads += assert_same_bits("master", a.master, r.master, n, 4, bf16, ctx);
        nan_payloads += assert_same_bits("m", a.m, r.m, n, 4, bf16, ctx);
        nan_payloads += assert_same_bits("v", a.v, r.v, n, 4, bf16, ctx);
        nan_payloads += assert_same_bits("param", pa, pr, n, 2, bf16, ctx);
        if (in_place) { /* the next step's gradient: the first one again */
            memcpy(a.grad, init->grad, n * 2), memcpy(r.grad, init->grad, n * 2);
        }
    }
    state_free(&a), state_free(&r);
    return nan_payloads;
}

static void random_state(adam_state *s, size_t n, int bf16) {
    for (size_t i = 0; i < n; i++) {
        float scale = ldexpf(1.0f, (int)(next_u64() % 30) - 24); /* gradients over many binades */
        s->grad[i] = zl_round_storage(uniform(-1, 1) * scale, bf16);
        s->m[i] = uniform(-1e-3f, 1e-3f);
        s->v[i] = uniform(0, 1e-5f);
        s->master[i] = uniform(-0.1f, 0.1f);
        s->param[i] = zl_round_storage(s->master[i], bf16);
    }
}

static void check_random(int bf16) {
    set_format(bf16);
    const size_t lens[] = {1, 7, 8, 9, 15, 31, 33, 1001, 32771};
    const int ts[] = {1, 2, 10, 1000};
    const float mults[] = {1.0f, 0x1p-10f, 3.7f};
    const float wds[] = {0.0f, 0.01f};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        adam_state init = state_alloc(n);
        random_state(&init, n, bf16);
        for (size_t ti = 0; ti < 4; ti++)
            for (size_t gi = 0; gi < 3; gi++)
                for (size_t wi = 0; wi < 2; wi++) {
                    zl_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, wds[wi]};
                    size_t nan_payloads = check_update(&init, n, mults[gi], ts[ti], hp, (int)((li + ti + gi) & 1), bf16);
                    cr_assert_eq(nan_payloads, 0, "finite inputs: every bit equal, no NaN anywhere");
                }
        state_free(&init);
    }
}
Test(host_adam, update_fp16_random_odd_lengths) { check_random(0); }
Test(host_adam, update_bf16_random_odd_lengths) { check_random(1); }

/* Every position of the arrays against a 16-byte boundary (0..7 elements past it), lengths
 * shorter and longer than the scalar head, separate and in place. */
static void check_every_skew(int bf16) {
    set_format(bf16);
    const size_t lens[] = {3, 8, 17, 1003};
    for (size_t skew = 0; skew < 8; skew++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            g_skew = skew;
            size_t n = lens[li];
            adam_state init = state_alloc(n);
            random_state(&init, n, bf16);
            zl_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
            for (int in_place = 0; in_place < 2; in_place++)
                cr_assert_eq(check_update(&init, n, 1.0f, 3, hp, in_place, bf16), 0, "finite inputs: every bit equal");
            state_free(&init);
        }
    g_skew = 1;
}
Test(host_adam, update_fp16_every_alignment) { check_every_skew(0); }
Test(host_adam, update_bf16_every_alignment) { check_every_skew(1); }

/* Special values in every input, cycled with coprime periods so they meet in many combinations:
 * infinite, NaN (quiet, signalling, negative) and subnormal gradients, huge, tiny, infinite
 * and NaN m, v and master. */
static void check_special(int bf16) {
    set_format(bf16);
    const zl_half g16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
                           0x7e00, 0x7c01, 0xfe01, 0x3c00, 0x1000};
    const zl_half gbf[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
                           0x7fc0, 0x7f81, 0xffc1, 0x3f80, 0x2000};
    const float ms[] = {0.0f, -0.0f, 1e-40f, FLT_MIN, 1e30f, -1e30f, FLT_MAX, -FLT_MAX, INFINITY, NAN, 1e-3f};
    const float vs[] = {0.0f, 1e-40f, FLT_MIN, 1e30f, FLT_MAX, INFINITY, NAN, 1e-6f, -0.0f, 1e-45f, 3e38f, 0.5f, 1e-20f};
    const float ws[] = {0.0f, -0.0f, 1e-40f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e30f, FLT_MAX, INFINITY, -NAN,
                        0.1f, 3.3895314e38f, 1e-8f, -2.5f, 7e-5f, 6e-8f};
    const size_t n = 15 * 11 * 13 + 5; /* every (grad, m, v) triple, and a tail */
    adam_state init = state_alloc(n);
    for (size_t i = 0; i < n; i++) {
        init.grad[i] = bf16 ? gbf[i % 15] : g16[i % 15];
        init.m[i] = ms[(i / 15) % 11];
        init.v[i] = vs[(i / 165) % 13];
        init.master[i] = ws[i % 17];
        init.param[i] = 0;
    }
    const float mults[] = {1.0f, 0x1p-16f, 1e30f};
    const int ts[] = {1, 3, 100000};
    size_t nan_payloads = 0;
    for (int k = 0; k < 3; k++)
        for (int wd = 0; wd < 2; wd++) {
            zl_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, wd ? 0.1f : 0.0f};
            nan_payloads += check_update(&init, n, mults[k], ts[k], hp, k & 1, bf16);
        }
    cr_log_info("%s special values: %zu outputs NaN in both with different payloads (of %zu)", bf16 ? "bf16" : "fp16",
                nan_payloads, 6 * 2 * 4 * n);
    state_free(&init);
}
Test(host_adam, update_fp16_special_values) { check_special(0); }
Test(host_adam, update_bf16_special_values) { check_special(1); }

/* ---- the update across threads, as --offload runs it ------------------------------------ */

/* Over several chunks and a ragged end, in place (offload's staging slice is both the gradient
 * in and the parameter out), any thread count gives the scalar reference's bits. */
static void check_threads(int bf16) {
    set_format(bf16);
    size_t n = 5 * ZL_HOST_ADAM_CHUNK + 123;
    adam_state init = state_alloc(n);
    random_state(&init, n, bf16);
    zl_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    const int threads[] = {1, 2, 3, 8, 64};
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        adam_state a = state_alloc(n), r = state_alloc(n);
        state_copy(&a, &init, n), state_copy(&r, &init, n);
        zl_host_adam_update_threads(a.master, a.m, a.v, a.grad, a.grad, n, 0x1p-10f, 3, hp, threads[k]);
        zl_cpu_adam_update(r.master, r.m, r.v, r.grad, r.grad, n, 0x1p-10f, 3, hp);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "%s, %d threads", bf16 ? "bf16" : "fp16", threads[k]);
        size_t nan_payloads = assert_same_bits("master", a.master, r.master, n, 4, bf16, ctx) +
                              assert_same_bits("m", a.m, r.m, n, 4, bf16, ctx) +
                              assert_same_bits("v", a.v, r.v, n, 4, bf16, ctx) +
                              assert_same_bits("param", a.grad, r.grad, n, 2, bf16, ctx);
        cr_assert_eq(nan_payloads, 0, "%s: finite inputs", ctx);
        state_free(&a), state_free(&r);
    }
    state_free(&init);
}
Test(host_adam, threads_fp16_same_bits) { check_threads(0); }
Test(host_adam, threads_bf16_same_bits) { check_threads(1); }

/* The team: no thread without a chunk (an idle member still waits at the barrier), never 0. */
Test(host_adam, team_no_larger_than_the_chunks) {
    const size_t C = ZL_HOST_ADAM_CHUNK;
    cr_expect_eq(zl_host_adam_team(0, 32), 1);
    cr_expect_eq(zl_host_adam_team(4176, 32), 1);
    cr_expect_eq(zl_host_adam_team(C, 32), 1);
    cr_expect_eq(zl_host_adam_team(C + 1, 32), 2);
    cr_expect_eq(zl_host_adam_team(3 * C + 1, 32), 4);
    cr_expect_eq(zl_host_adam_team(2048 * C, 32), 32);
    cr_expect_eq(zl_host_adam_team(3 * C, 0), 1);
    cr_expect_eq(zl_host_adam_team(3 * C, -4), 1);
}

/* ---- how many threads: the rank's share of its node's CPUs (zl_offload_threads) ------------ */

enum { NODE_CPUS = 16, MASK_BYTES = 128 }; /* masks as the runtime gathers them: CPU_SETSIZE bits */

/* masks[r]: CPUs [first[r], first[r] + count[r]) of a 16-core node */
static int threads_of(int ranks, int me, const int *first, const int *count) {
    static unsigned char masks[8][MASK_BYTES];
    memset(masks, 0, sizeof masks);
    for (int r = 0; r < ranks; r++)
        for (int c = first[r]; c < first[r] + count[r]; c++) masks[r][c / 8] |= (unsigned char)(1u << (c % 8));
    return zl_offload_threads(&masks[0][0], MASK_BYTES, ranks, me);
}

/* Unbound ranks (every mask the whole node) divide it; ranks a launcher bound to CPUs of their
 * own (Slurm --cpus-per-task 4, Open MPI PE=4: 4 tasks x 4 CPUs on 16 cores) keep their set
 * whole (the old rule divided it again by the 4 ranks: 1 thread); a rank bound to one core
 * gets 1; ranks that share a socket's set split that set; never 0. */
Test(host_adam_threads, a_cpu_is_divided_only_among_the_ranks_that_share_it) {
    int all0[4] = {0, 0, 0, 0}, all16[4] = {NODE_CPUS, NODE_CPUS, NODE_CPUS, NODE_CPUS};
    cr_expect_eq(threads_of(1, 0, all0, all16), 16, "one unbound rank: the node");
    cr_expect_eq(threads_of(4, 2, all0, all16), 4, "4 unbound ranks: 16 / 4");
    cr_expect_eq(threads_of(3, 1, all0, all16), 5, "3 unbound ranks: 16 / 3, rounded down");
    int own[4] = {0, 4, 8, 12}, four[4] = {4, 4, 4, 4};
    for (int r = 0; r < 4; r++) cr_expect_eq(threads_of(4, r, own, four), 4, "rank %d bound to 4 CPUs of its own", r);
    int uneven_first[3] = {0, 8, 12}, uneven[3] = {8, 4, 4};
    cr_expect_eq(threads_of(3, 0, uneven_first, uneven), 8, "a larger set of its own, whole");
    int cores[4] = {0, 1, 2, 3}, one[4] = {1, 1, 1, 1};
    cr_expect_eq(threads_of(4, 3, cores, one), 1, "bound to one core");
    int same_core[2] = {5, 5}, one2[2] = {1, 1};
    cr_expect_eq(threads_of(2, 0, same_core, one2), 1, "two ranks on one core: half a core, still 1");
    int sockets[4] = {0, 0, 8, 8}, socket[4] = {8, 8, 8, 8};
    cr_expect_eq(threads_of(4, 1, sockets, socket), 4, "2 ranks per 8-core socket: 8 / 2");
    int job[2] = {0, 0}, job_cpus[2] = {6, 6};
    cr_expect_eq(threads_of(2, 1, job, job_cpus), 3, "2 ranks sharing a job's 6 CPUs (no per-task binding)");
}
