/* test_kernels.c — Criterion tests of the CPU reference kernels (kernels/cpu/kernels_cpu.c)
 * and of zl_math.h's fp16 and bf16 conversions, in both storage formats.
 *
 * Every check compares against something written independently of the code under test:
 *   - fp16 conversions against GCC's _Float16 (libgcc soft-float, round to nearest even);
 *   - bf16 conversions against a value decoded field by field with ldexp, and rounding by
 *     picking the nearer neighbour in double arithmetic (ties to the even pattern);
 *   - the block forward against a scalar double-precision forward written here;
 *   - the block backward against central finite differences of that double forward;
 *   - GELU, MSE and AdamW against double formulas / finite differences written here;
 *   - data and init against the documented formulas and statistics.
 * The gradient checks also feed deliberately wrong gradients to their own comparator and
 * require it to reject them, so a tolerance that accepts anything would be caught.
 * Workspaces are malloc'ed at exactly zl_cpu_workspace_bytes() so ASan sees overruns.
 * The bf16 tests run the same checks with the storage format switched to bf16 (each test
 * runs in its own process, so the switch never leaks) and tolerances scaled to bf16's
 * unit roundoff, 2^-8 instead of fp16's 2^-11.
 *
 * Build: gcc -std=c11 -O1 -g -Wall -Wextra -Ikernels tests/test_kernels.c kernels/storage.c \
 *            kernels/cpu/kernels_cpu.c -lcriterion -lm -o /tmp/tk && /tmp/tk */
#include <criterion/criterion.h>

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "zl_ref_bf16.h" /* the independent bf16 reference: ref_bf16_value, ref_f2bf */

/* ---- helpers ------------------------------------------------------------------------ */

/* Test-local PRNG (xorshift64*), independent of the library's splitmix-based generator. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static void rng_seed(uint64_t s) { g_rng = s ? s : 1; }
static uint64_t rng_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}
static uint32_t rng_u32(void) { return (uint32_t)(rng_u64() >> 32); }
static double rng_uniform(double lo, double hi) { /* [lo, hi) */
    return lo + (hi - lo) * ((double)(rng_u64() >> 11) * 0x1.0p-53);
}

/* The independent fp16 reference: GCC's _Float16 conversions. */
static uint16_t ref_f2h(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static float ref_h2f(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
static int half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

/* The storage format under test: fp16 unless a test calls use_bf16() first. */
static int g_bf16;
static void use_bf16(void) {
    cr_assert_eq(zl_kernels_set_dtype(ZL_BF16), 0);
    g_bf16 = 1;
}
static double unit_roundoff(void) { return g_bf16 ? 0x1p-8 : 0x1p-11; }
static double tol_scale(void) { return g_bf16 ? 8.0 : 1.0; } /* ratio of the unit roundoffs */
static uint16_t ref_round(float f) { return g_bf16 ? ref_f2bf(f) : ref_f2h(f); }

static double h2d(zl_half h) { return g_bf16 ? ref_bf16_value(h) : (double)ref_h2f(h); }

static zl_half *half_alloc(size_t n) {
    zl_half *p = malloc(n * sizeof(zl_half) + 1);
    cr_assert(p != NULL);
    return p;
}
static double *dbl_alloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    cr_assert(p != NULL);
    return p;
}
static void fill_half_uniform(zl_half *p, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) p[i] = ref_round((float)rng_uniform(-scale, scale));
}
static void half_to_dbl(double *d, const zl_half *h, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = h2d(h[i]);
}

/* Allocate exactly the advertised workspace (ASan catches any overrun) and install it. */
static void *install_exact_workspace(int rows, int dim) {
    size_t bytes = zl_cpu_workspace_bytes(rows, dim);
    cr_assert(bytes > 0, "workspace for rows=%d dim=%d is 0 bytes", rows, dim);
    void *ws = malloc(bytes);
    cr_assert(ws != NULL);
    zl_cpu_set_workspace(ws, bytes);
    return ws;
}

/* ---- double-precision reference model ------------------------------------------------ */

static double ref_gelu(double x) {
    const double k = sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) { /* analytic, used only for the dh reference */
    const double k = sqrt(2.0 / 3.14159265358979323846);
    double t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

typedef struct {
    int R, D, H;
    double *x, *W1, *b1, *W2, *b2; /* inputs */
    double *h, *a, *y;             /* outputs */
} ref_model;

static void ref_forward(ref_model *m) {
    int R = m->R, D = m->D, H = m->H;
    for (int i = 0; i < R; i++) {
        for (int k = 0; k < H; k++) {
            double s = m->b1[k];
            for (int j = 0; j < D; j++) s += m->x[i * D + j] * m->W1[j * H + k];
            m->h[i * H + k] = s;
            m->a[i * H + k] = ref_gelu(s);
        }
        for (int j = 0; j < D; j++) {
            double s = m->x[i * D + j] + m->b2[j];
            for (int k = 0; k < H; k++) s += m->a[i * H + k] * m->W2[k * D + j];
            m->y[i * D + j] = s;
        }
    }
}

/* ---- the fp16 block under test ---------------------------------------------------------- */

typedef struct {
    int R, D, H;
    zl_half *x, *W1, *b1, *W2, *b2, *h, *a, *y;
    zl_half *dy, *dh, *dW1, *db1, *dW2, *db2, *dx;
} block16;

static void block16_init(block16 *b, int R, int D, uint64_t seed) {
    int H = 4 * D;
    b->R = R, b->D = D, b->H = H;
    b->x = half_alloc((size_t)R * D), b->W1 = half_alloc((size_t)D * H), b->b1 = half_alloc((size_t)H);
    b->W2 = half_alloc((size_t)H * D), b->b2 = half_alloc((size_t)D);
    b->h = half_alloc((size_t)R * H), b->a = half_alloc((size_t)R * H), b->y = half_alloc((size_t)R * D);
    b->dy = half_alloc((size_t)R * D), b->dh = half_alloc((size_t)R * H), b->dW1 = half_alloc((size_t)D * H);
    b->db1 = half_alloc((size_t)H), b->dW2 = half_alloc((size_t)H * D), b->db2 = half_alloc((size_t)D);
    b->dx = half_alloc((size_t)R * D);
    rng_seed(seed);
    /* scales chosen so h = x·W1 + b1 is O(1), exercising the curved part of GELU */
    fill_half_uniform(b->x, (size_t)R * D, 1.0);
    fill_half_uniform(b->W1, (size_t)D * H, 1.5 / sqrt((double)D));
    fill_half_uniform(b->b1, (size_t)H, 0.5);
    fill_half_uniform(b->W2, (size_t)H * D, 1.0 / sqrt((double)H));
    fill_half_uniform(b->b2, (size_t)D, 0.5);
    fill_half_uniform(b->dy, (size_t)R * D, 1.0);
}

static void block16_free(block16 *b) {
    zl_half *all[] = {b->x, b->W1, b->b1, b->W2, b->b2, b->h, b->a, b->y,
                      b->dy, b->dh, b->dW1, b->db1, b->dW2, b->db2, b->dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void block16_forward(block16 *b) {
    zl_cpu_block_forward(b->x, b->W1, b->b1, b->W2, b->b2, b->h, b->a, b->y, b->R, b->D);
}
static void block16_backward(block16 *b) {
    zl_cpu_block_backward(b->x, b->h, b->a, b->W1, b->W2, b->dy, b->dh, b->dW1, b->db1, b->dW2, b->db2, b->dx,
                          ZL_GRADS_WRITE, b->R, b->D);
}

/* ref model with the same (fp16-valued) inputs */
static void ref_from_block(ref_model *m, const block16 *b) {
    m->R = b->R, m->D = b->D, m->H = b->H;
    size_t RD = (size_t)b->R * b->D, RH = (size_t)b->R * b->H, DH = (size_t)b->D * b->H;
    m->x = dbl_alloc(RD), m->W1 = dbl_alloc(DH), m->b1 = dbl_alloc((size_t)b->H);
    m->W2 = dbl_alloc(DH), m->b2 = dbl_alloc((size_t)b->D);
    m->h = dbl_alloc(RH), m->a = dbl_alloc(RH), m->y = dbl_alloc(RD);
    half_to_dbl(m->x, b->x, RD), half_to_dbl(m->W1, b->W1, DH), half_to_dbl(m->b1, b->b1, (size_t)b->H);
    half_to_dbl(m->W2, b->W2, DH), half_to_dbl(m->b2, b->b2, (size_t)b->D);
}
static void ref_free(ref_model *m) {
    double *all[] = {m->x, m->W1, m->b1, m->W2, m->b2, m->h, m->a, m->y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* ==== fp16 conversions ==================================================================== */

static void check_f2h(float f) {
    uint16_t got = zl_float_to_half(f), want = ref_f2h(f);
    if (isnan(f)) {
        cr_assert(half_is_nan(got), "zl_float_to_half(NaN 0x%08x) = 0x%04x is not a NaN", (unsigned)zl_f32_bits(f),
                  got);
        return;
    }
    cr_assert_eq(got, want, "zl_float_to_half(%a = 0x%08x) = 0x%04x, _Float16 gives 0x%04x", (double)f,
                 (unsigned)zl_f32_bits(f), got, want);
}

Test(fp16, special_cases_explicit_bits) {
    struct {
        float f;
        uint16_t bits;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},              /* largest normal */
        {65519.99f, 0x7bff},             /* just below the overflow midpoint */
        {65520.0f, 0x7c00},              /* overflow midpoint ties to "even" = inf */
        {-65520.0f, 0xfc00},
        {1e10f, 0x7c00},
        {0x1p-14f, 0x0400},              /* smallest normal */
        {0x1.ff8p-15f, 0x03ff},          /* largest subnormal */
        {0x1.ffcp-15f, 0x0400},          /* tie between it and the smallest normal -> even */
        {0x1p-24f, 0x0001},              /* smallest subnormal */
        {0x1.8p-24f, 0x0002},            /* 3·2^-25: tie between 1 and 2 ulps -> even (2) */
        {0x1.4p-23f, 0x0002},            /* 5·2^-25: tie between 2 and 3 ulps -> even (2) */
        {0x1p-25f, 0x0000},              /* tie between 0 and 1 ulp -> even (0) */
        {0x1.000002p-25f, 0x0001},       /* just above that tie */
        {0x1.fffffep-26f, 0x0000},       /* just below 2^-25 */
        {-0x1.fffffep-26f, 0x8000},      /* ... keeps its sign */
        {1e-30f, 0x0000},
        {0x1.002p+0f, 0x3c00},           /* 1 + 2^-11: tie -> even (1.0) */
        {0x1.006p+0f, 0x3c02},           /* 1 + 3·2^-11: tie -> even (1 + 2^-9) */
        {0x1.002002p+0f, 0x3c01},        /* one float ulp above that tie -> rounds up */
        {2049.0f, 0x6800},               /* 2048 + 1: tie -> 2048 */
        {2051.0f, 0x6802},               /* 2048 + 3: tie -> 2052 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = zl_float_to_half(cases[i].f);
        cr_assert_eq(got, cases[i].bits, "case %zu: zl_float_to_half(%a) = 0x%04x, want 0x%04x", i,
                     (double)cases[i].f, got, cases[i].bits);
        cr_assert_eq(ref_f2h(cases[i].f), cases[i].bits, "case %zu: test's expectation disagrees with _Float16", i);
    }
    cr_assert(half_is_nan(zl_float_to_half(NAN)));
    cr_assert(half_is_nan(zl_float_to_half(-NAN)));
    cr_assert(half_is_nan(zl_float_to_half(bits_to_float(0x7f800001u)))); /* signalling, low payload */
    cr_assert(half_is_nan(zl_float_to_half(bits_to_float(0xff800001u))));
}

Test(fp16, random_floats_match_Float16) {
    rng_seed(1);
    /* any bit pattern: every exponent, NaNs, infinities, denormal floats */
    for (int i = 0; i < 2000000; i++) check_f2h(bits_to_float(rng_u32()));
    /* exponents around the fp16 range (2^-27 .. 2^17) with random or tie-shaped mantissas */
    const uint32_t low13[] = {0x0000, 0x0fff, 0x1000, 0x1001, 0x1fff};
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rng_u32();
        uint32_t exp = 100u + (u % 45u);
        uint32_t man = rng_u32() & 0x7fffffu;
        if (i & 1) man = (man & ~0x1fffu) | low13[(u >> 8) % 5];
        check_f2h(bits_to_float(((u >> 31) << 31) | (exp << 23) | man));
    }
}

/* Exhaustive over rounding boundaries: every midpoint between adjacent finite halves
 * (including the virtual 65536 above 65504), the midpoint's float neighbours, and every
 * half value itself, with both signs. */
Test(fp16, all_midpoints_match_Float16) {
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        float v = ref_h2f((uint16_t)h);
        float next = h == 0x7bffu ? 65536.0f : ref_h2f((uint16_t)(h + 1));
        float mid = v + (next - v) * 0.5f; /* exact: one more bit than fp16 has */
        float pts[] = {v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (size_t k = 0; k < 4; k++) {
            check_f2h(pts[k]);
            check_f2h(-pts[k]);
        }
    }
}

Test(fp16, half_to_float_all_65536) {
    for (uint32_t u = 0; u < 65536u; u++) {
        float got = zl_half_to_float((zl_half)u), want = ref_h2f((uint16_t)u);
        if (half_is_nan((uint16_t)u)) {
            cr_assert(isnan(got) && isnan(want), "0x%04x: NaN expected", u);
            continue;
        }
        cr_assert_eq(zl_f32_bits(got), zl_f32_bits(want), "zl_half_to_float(0x%04x) = %a, _Float16 gives %a", u,
                     (double)got, (double)want);
        /* and the round trip is the identity on non-NaN halves */
        cr_assert_eq(zl_float_to_half(got), u, "round trip of 0x%04x", u);
    }
}

/* ==== bf16 conversions ===================================================================== */

static void check_f2bf(float f) {
    uint16_t got = zl_float_to_bf16(f);
    if (isnan(f)) {
        cr_assert(bf16_is_nan(got), "zl_float_to_bf16(NaN 0x%08x) = 0x%04x is not a NaN", (unsigned)zl_f32_bits(f),
                  got);
        cr_assert_eq(got & 0x8000u, (zl_f32_bits(f) >> 16) & 0x8000u, "NaN 0x%08x lost its sign",
                     (unsigned)zl_f32_bits(f));
        return;
    }
    uint16_t want = ref_f2bf(f);
    cr_assert_eq(got, want, "zl_float_to_bf16(%a = 0x%08x) = 0x%04x, reference 0x%04x", (double)f,
                 (unsigned)zl_f32_bits(f), got, want);
}

/* The reference itself, on hand-worked cases (so a wrong reference cannot agree with a
 * wrong implementation): ties, the overflow boundary, subnormals. */
Test(bf16, special_cases_explicit_bits) {
    struct {
        float f;
        uint16_t bits;
    } cases[] = {
        {0.0f, 0x0000},           {-0.0f, 0x8000},          {INFINITY, 0x7f80},        {-INFINITY, 0xff80},
        {1.0f, 0x3f80},           {-2.0f, 0xc000},          {0x1.01p+0f, 0x3f80},     /* 1 + 2^-8: tie -> even (1) */
        {0x1.03p+0f, 0x3f82},     /* 1 + 3·2^-8: tie -> even (1 + 2^-6) */
        {0x1.010002p+0f, 0x3f81}, /* just above the first tie */
        {0x1.fep+127f, 0x7f7f},   /* largest finite bf16 */
        {0x1.feffp+127f, 0x7f7f}, /* below the overflow midpoint */
        {0x1.ffp+127f, 0x7f80},   /* the overflow midpoint: tie -> "even" = inf */
        {0x1.fffffep+127f, 0x7f80}, /* FLT_MAX overflows */
        {0x1p-126f, 0x0080},      /* smallest normal */
        {0x1p-133f, 0x0001},      /* smallest bf16 subnormal */
        {0x1p-134f, 0x0000},      /* tie between 0 and 1 ulp -> even (0) */
        {0x1.8p-133f, 0x0002},    /* 3·2^-134: tie between 1 and 2 ulps -> even (2) */
        {0x1p-149f, 0x0000},      /* the smallest float subnormal */
        {-0x1.0002p-134f, 0x8001}, /* just above a tie (float subnormal spacing 2^-149), negative */
        {257.0f, 0x4380},         /* 256 + 1: tie -> 256 */
        {259.0f, 0x4382},         /* 256 + 3: tie -> 260 */
        {3.140625f, 0x4049},      /* exact */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(ref_f2bf(cases[i].f), cases[i].bits, "case %zu: reference gives 0x%04x for %a, want 0x%04x", i,
                     ref_f2bf(cases[i].f), (double)cases[i].f, cases[i].bits);
        cr_assert_eq(zl_float_to_bf16(cases[i].f), cases[i].bits, "case %zu: zl_float_to_bf16(%a) = 0x%04x, want 0x%04x",
                     i, (double)cases[i].f, zl_float_to_bf16(cases[i].f), cases[i].bits);
    }
    check_f2bf(NAN);
    check_f2bf(-NAN);
    check_f2bf(bits_to_float(0x7f800001u)); /* signalling, low payload: must not become inf */
    check_f2bf(bits_to_float(0xff800001u));
    check_f2bf(bits_to_float(0x7fffffffu)); /* all-ones payload: must not carry into the sign */
}

Test(bf16, bf16_to_float_all_65536_and_round_trip) {
    for (uint32_t u = 0; u < 65536u; u++) {
        float got = zl_bf16_to_float((zl_half)u);
        if (bf16_is_nan((uint16_t)u)) {
            cr_assert(isnan(got), "0x%04x: NaN expected", u);
            cr_assert(bf16_is_nan(zl_float_to_bf16(got)), "0x%04x: NaN round trip", u);
            continue;
        }
        if ((u & 0x7fffu) == 0x7f80u)
            cr_assert(isinf(got) && (got < 0) == (u >> 15), "0x%04x: inf expected, got %a", u, (double)got);
        else
            cr_assert_eq((double)got, ref_bf16_value((uint16_t)u), "zl_bf16_to_float(0x%04x) = %a, want %a", u,
                         (double)got, ref_bf16_value((uint16_t)u));
        cr_assert_eq(zl_float_to_bf16(got), u, "round trip of 0x%04x", u);
    }
}

/* Exhaustive over rounding boundaries: every bf16 value, every midpoint between adjacent
 * finite values (including the virtual 2^128 above the largest), and the midpoint's float
 * neighbours, with both signs. */
Test(bf16, all_midpoints_match_reference) {
    for (uint32_t b = 0; b < 0x7f80u; b++) {
        double v = ref_bf16_value((uint16_t)b), next = ref_bf16_magnitude((uint16_t)(b + 1));
        float mid = (float)(v + (next - v) * 0.5); /* exact: one more bit than bf16 has */
        cr_assert_eq((double)mid, v + (next - v) * 0.5, "midpoint above 0x%04x is not a float", b);
        float pts[] = {(float)v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (size_t k = 0; k < 4; k++) {
            check_f2bf(pts[k]);
            check_f2bf(-pts[k]);
        }
    }
}

Test(bf16, random_floats_match_reference) {
    rng_seed(2);
    for (int i = 0; i < 1000000; i++) check_f2bf(bits_to_float(rng_u32())); /* any pattern, NaNs included */
    for (int i = 0; i < 1000000; i++) { /* tie-shaped low halves */
        const uint32_t low16[] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff};
        check_f2bf(bits_to_float((rng_u32() & 0xffff0000u) | low16[i % 5]));
    }
}

Test(bf16, storage_format_switch) {
    cr_assert_eq(zl_kernels_dtype(), ZL_F16, "the default storage format must be fp16");
    cr_assert_eq(zl_storage_from_float(1.0f / 3.0f), zl_float_to_half(1.0f / 3.0f));
    cr_assert_eq(zl_storage_to_float(0x3c00), 1.0f);
    cr_assert_eq(zl_kernels_set_dtype(ZL_F32), -1);
    cr_assert_eq(zl_kernels_set_dtype(ZL_F64), -1);
    cr_assert_eq(zl_kernels_dtype(), ZL_F16, "a rejected format changed the setting");
    use_bf16();
    cr_assert_eq(zl_kernels_dtype(), ZL_BF16);
    cr_assert_eq(zl_storage_from_float(1.0f / 3.0f), ref_f2bf(1.0f / 3.0f));
    cr_assert_eq(zl_storage_from_float(INFINITY), 0x7f80, "fault injection writes +inf through this");
    cr_assert_eq(zl_storage_to_float(0x3f80), 1.0f);
    cr_assert_eq(zl_storage_from_float(1e30f), ref_f2bf(1e30f), "bf16 holds fp32's range");
    cr_assert_eq(zl_dtype_size(ZL_BF16), 2);
    cr_assert_str_eq(zl_dtype_name(ZL_BF16), "bf16");
    cr_assert_eq(zl_kernels_set_dtype(ZL_F16), 0);
    cr_assert_eq(zl_storage_from_float(1.0f / 3.0f), zl_float_to_half(1.0f / 3.0f));
}

/* ==== GELU ============================================================================== */

Test(gelu, value_and_grad_vs_double) {
    const double eps = 1e-5;
    int n = 0;
    for (double x = -10.0; x <= 10.0; x += 0.01221, n++) {
        float xf = (float)x;
        double xd = (double)xf;
        double g = ref_gelu(xd);
        double gf = zl_cpu_gelu(xf);
        cr_assert(fabs(gf - g) <= 2e-6 * fabs(g) + 2e-7, "gelu(%g) = %.9g, double ref %.9g", xd, gf, g);
        double fd = (ref_gelu(xd + eps) - ref_gelu(xd - eps)) / (2 * eps);
        double dg = zl_cpu_gelu_grad(xf);
        cr_assert(fabs(dg - fd) <= 2e-6 * fabs(fd) + 2e-6, "gelu_grad(%g) = %.9g, finite difference %.9g", xd, dg,
                  fd);
    }
    cr_assert(n > 1000);
    /* spot values that pin down the formula (tanh approximation, not erf) */
    cr_assert(fabs(zl_cpu_gelu(1.0f) - 0.8411920f) < 1e-6);
    cr_assert(fabs(zl_cpu_gelu_grad(0.0f) - 0.5f) < 1e-7);
}

/* ==== block forward ========================================================================= */

static void check_forward(int R, int D, uint64_t seed) {
    block16 b;
    block16_init(&b, R, D, seed);
    void *ws = install_exact_workspace(R, D);
    block16_forward(&b);
    ref_model m;
    ref_from_block(&m, &b);
    ref_forward(&m);
    int H = 4 * D;
    const double u = 2 * unit_roundoff(); /* covers storage + fp32 accumulation */
    double err2 = 0, ref2 = 0;
    for (int i = 0; i < R; i++) {
        for (int k = 0; k < H; k++) {
            double mag = fabs(m.b1[k]);
            for (int j = 0; j < D; j++) mag += fabs(m.x[i * D + j] * m.W1[j * H + k]);
            double tol_h = u * (fabs(m.h[i * H + k]) + mag) + 1e-6;
            double gh = h2d(b.h[i * H + k]), ga = h2d(b.a[i * H + k]);
            cr_assert(fabs(gh - m.h[i * H + k]) <= tol_h, "R=%d D=%d h[%d,%d] = %.6g, ref %.6g", R, D, i, k, gh,
                      m.h[i * H + k]);
            double tol_a = u * fabs(m.a[i * H + k]) + 1.2 * tol_h;
            cr_assert(fabs(ga - m.a[i * H + k]) <= tol_a, "R=%d D=%d a[%d,%d] = %.6g, ref %.6g", R, D, i, k, ga,
                      m.a[i * H + k]);
        }
        for (int j = 0; j < D; j++) {
            double mag = fabs(m.x[i * D + j]) + fabs(m.b2[j]);
            for (int k = 0; k < H; k++) mag += fabs(m.a[i * H + k] * m.W2[k * D + j]);
            /* a's own error (≤ u|a|) is propagated through W2 inside mag */
            double tol = u * (fabs(m.y[i * D + j]) + 2 * mag) + 1e-6;
            double gy = h2d(b.y[i * D + j]), ry = m.y[i * D + j];
            cr_assert(fabs(gy - ry) <= tol, "R=%d D=%d y[%d,%d] = %.6g, ref %.6g (tol %.3g)", R, D, i, j, gy, ry, tol);
            err2 += (gy - ry) * (gy - ry);
            ref2 += ry * ry;
        }
    }
    cr_assert(ref2 > 1e-4 * R * D, "reference output suspiciously small (%g)", ref2);
    cr_assert(sqrt(err2 / ref2) < 2e-3 * tol_scale(), "relative error %.3g", sqrt(err2 / ref2));
    ref_free(&m);
    block16_free(&b);
    free(ws);
}

/* shapes chosen to hit every GEMM path: full 4×16 tiles, row and column remainders */
Test(block_forward, tiny_shapes) {
    check_forward(1, 1, 11);
    check_forward(3, 4, 12);
    check_forward(5, 6, 13);
}
Test(block_forward, tile_edges) {
    check_forward(7, 16, 21);
    check_forward(9, 20, 22);
    check_forward(4, 36, 23);
}
Test(block_forward, demo_like) { check_forward(32, 64, 31); }

/* ==== block backward: finite differences ====================================================== */

/* Objective L = Σ y ⊙ Rw over the double reference forward. */
static double ref_objective(ref_model *m, const double *Rw) {
    ref_forward(m);
    double L = 0;
    for (int i = 0; i < m->R * m->D; i++) L += m->y[i] * Rw[i];
    return L;
}

/* Central differences of L with respect to every element of p[0..n). */
static void finite_diff(ref_model *m, const double *Rw, double *p, size_t n, double *out) {
    for (size_t i = 0; i < n; i++) {
        double keep = p[i], e = 1e-5 * (fabs(keep) > 1 ? fabs(keep) : 1);
        p[i] = keep + e;
        double Lp = ref_objective(m, Rw);
        p[i] = keep - e;
        double Lm = ref_objective(m, Rw);
        p[i] = keep;
        out[i] = (Lp - Lm) / (2 * e);
    }
}

/* Does gradient g (stored) match the reference r? Relative error in norm < 1e-2 (bf16:
 * 3e-2, still below the 5% scale error the comparator must reject), every element within
 * 2e-2 (bf16: 6e-2) of the tensor's largest magnitude, and the reference itself is not ~0
 * (so the comparison cannot pass trivially). */
static int grad_matches(const zl_half *g, const double *r, size_t n, double *rel_out) {
    double e2 = 0, r2 = 0, rmax = 0, emax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = h2d(g[i]) - r[i];
        e2 += d * d;
        r2 += r[i] * r[i];
        if (fabs(r[i]) > rmax) rmax = fabs(r[i]);
        if (fabs(d) > emax) emax = fabs(d);
    }
    double rel = r2 > 0 ? sqrt(e2 / r2) : INFINITY;
    if (rel_out) *rel_out = rel;
    double tol = g_bf16 ? 3e-2 : 1e-2;
    return r2 > 1e-6 && rel < tol && emax <= 2 * tol * rmax;
}

/* The comparator must reject plausible bugs: a 5% scale error and a reversed layout. */
static void check_comparator_rejects_wrong(const zl_half *g, const double *r, size_t n, const char *name) {
    zl_half *w = half_alloc(n);
    for (size_t i = 0; i < n; i++) w[i] = ref_round(1.05f * (float)h2d(g[i]));
    cr_assert(!grad_matches(w, r, n, NULL), "%s: comparator accepted a gradient scaled by 1.05", name);
    if (n > 1) {
        for (size_t i = 0; i < n; i++) w[i] = g[n - 1 - i];
        cr_assert(!grad_matches(w, r, n, NULL), "%s: comparator accepted a reversed gradient", name);
    }
    free(w);
}

static void check_backward_fd(int R, int D, uint64_t seed) {
    block16 b;
    block16_init(&b, R, D, seed);
    int H = 4 * D;
    size_t RD = (size_t)R * D, DH = (size_t)D * H;
    void *ws = install_exact_workspace(R, D);
    block16_forward(&b);
    block16_backward(&b); /* dy = Rw, exactly fp16-representable */

    ref_model m;
    ref_from_block(&m, &b);
    double *Rw = dbl_alloc(RD);
    half_to_dbl(Rw, b.dy, RD);

    struct {
        const char *name;
        double *param;
        size_t n;
        const zl_half *grad;
    } checks[] = {
        {"dW1", m.W1, DH, b.dW1}, {"db1", m.b1, (size_t)H, b.db1}, {"dW2", m.W2, DH, b.dW2},
        {"db2", m.b2, (size_t)D, b.db2}, {"dx", m.x, RD, b.dx},
    };
    for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
        double *fd = dbl_alloc(checks[c].n);
        finite_diff(&m, Rw, checks[c].param, checks[c].n, fd);
        double rel;
        int ok = grad_matches(checks[c].grad, fd, checks[c].n, &rel);
        cr_assert(ok, "R=%d D=%d %s: analytic vs finite differences, relative error %.3g", R, D, checks[c].name,
                  rel);
        check_comparator_rejects_wrong(checks[c].grad, fd, checks[c].n, checks[c].name);
        free(fd);
    }

    /* dh = (dy·W2ᵀ) ⊙ gelu'(h), against a double analytic reference at the exact h */
    ref_forward(&m);
    double *dh_ref = dbl_alloc((size_t)R * H);
    for (int i = 0; i < R; i++)
        for (int k = 0; k < H; k++) {
            double s = 0;
            for (int j = 0; j < D; j++) s += Rw[i * D + j] * m.W2[k * D + j];
            dh_ref[i * H + k] = s * ref_gelu_grad(m.h[i * H + k]);
        }
    double rel;
    cr_assert(grad_matches(b.dh, dh_ref, (size_t)R * H, &rel), "R=%d D=%d dh: relative error %.3g", R, D, rel);
    free(dh_ref);

    free(Rw);
    ref_free(&m);
    block16_free(&b);
    free(ws);
}

Test(block_backward, finite_differences_3x4) { check_backward_fd(3, 4, 101); }
Test(block_backward, finite_differences_5x6) { check_backward_fd(5, 6, 102); }
Test(block_backward, finite_differences_6x16) { check_backward_fd(6, 16, 103); }

/* Larger shapes (all GEMM tile paths) against the double analytic backward evaluated at
 * the kernel's own fp16 h/a, so only the backward's rounding is measured. */
static void check_backward_analytic(int R, int D, uint64_t seed) {
    block16 b;
    block16_init(&b, R, D, seed);
    int H = 4 * D;
    void *ws = install_exact_workspace(R, D);
    block16_forward(&b);
    block16_backward(&b);
    double *dy = dbl_alloc((size_t)R * D), *x = dbl_alloc((size_t)R * D), *h = dbl_alloc((size_t)R * H);
    double *a = dbl_alloc((size_t)R * H), *W1 = dbl_alloc((size_t)D * H), *W2 = dbl_alloc((size_t)D * H);
    half_to_dbl(dy, b.dy, (size_t)R * D), half_to_dbl(x, b.x, (size_t)R * D);
    half_to_dbl(h, b.h, (size_t)R * H), half_to_dbl(a, b.a, (size_t)R * H);
    half_to_dbl(W1, b.W1, (size_t)D * H), half_to_dbl(W2, b.W2, (size_t)D * H);
    double *dh = dbl_alloc((size_t)R * H), *dW1 = dbl_alloc((size_t)D * H), *dW2 = dbl_alloc((size_t)D * H);
    double *db1 = dbl_alloc((size_t)H), *db2 = dbl_alloc((size_t)D), *dx = dbl_alloc((size_t)R * D);
    for (int i = 0; i < R; i++)
        for (int k = 0; k < H; k++) {
            double s = 0;
            for (int j = 0; j < D; j++) s += dy[i * D + j] * W2[k * D + j];
            dh[i * H + k] = s * ref_gelu_grad(h[i * H + k]);
        }
    for (int i = 0; i < R; i++) {
        for (int k = 0; k < H; k++) {
            db1[k] += dh[i * H + k];
            for (int j = 0; j < D; j++) {
                dW2[k * D + j] += a[i * H + k] * dy[i * D + j];
                dW1[j * H + k] += x[i * D + j] * dh[i * H + k];
            }
        }
        for (int j = 0; j < D; j++) {
            db2[j] += dy[i * D + j];
            double s = dy[i * D + j];
            for (int k = 0; k < H; k++) s += dh[i * H + k] * W1[j * H + k];
            dx[i * D + j] = s;
        }
    }
    struct {
        const char *name;
        const zl_half *g;
        const double *r;
        size_t n;
    } checks[] = {{"dh", b.dh, dh, (size_t)R * H},   {"dW1", b.dW1, dW1, (size_t)D * H},
                  {"db1", b.db1, db1, (size_t)H},      {"dW2", b.dW2, dW2, (size_t)D * H},
                  {"db2", b.db2, db2, (size_t)D},      {"dx", b.dx, dx, (size_t)R * D}};
    for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
        double rel;
        cr_assert(grad_matches(checks[c].g, checks[c].r, checks[c].n, &rel), "R=%d D=%d %s: relative error %.3g", R,
                  D, checks[c].name, rel);
        /* much tighter than the FD comparator: only rounding separates the two */
        cr_assert(rel < 3e-3 * tol_scale(), "R=%d D=%d %s: relative error %.3g", R, D, checks[c].name, rel);
    }
    double *all[] = {dy, x, h, a, W1, W2, dh, dW1, dW2, db1, db2, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    block16_free(&b);
    free(ws);
}

Test(block_backward, analytic_tile_shapes) {
    check_backward_analytic(7, 16, 201);
    check_backward_analytic(9, 20, 202);
    check_backward_analytic(37, 48, 203);
}

/* ==== determinism, overwrite semantics and the workspace ========================================= */

static int halves_equal(const zl_half *a, const zl_half *b, size_t n) { return memcmp(a, b, n * 2) == 0; }

/* Same inputs -> same bits, regardless of what the outputs and the workspace held
 * before (the kernels must overwrite, never accumulate or read stale scratch), and with
 * a workspace pointer that is not aligned. */
Test(block, deterministic_and_overwrites) {
    const int R = 13, D = 20, H = 80;
    block16 b1, b2;
    block16_init(&b1, R, D, 301);
    block16_init(&b2, R, D, 301);
    size_t bytes = zl_cpu_workspace_bytes(R, D);
    unsigned char *ws1 = calloc(1, bytes), *ws2 = malloc(bytes + 3);
    cr_assert(ws1 && ws2);
    memset(ws2, 0xff, bytes + 3); /* NaN patterns everywhere */
    zl_cpu_set_workspace(ws1, bytes);
    block16_forward(&b1);
    block16_backward(&b1);
    /* garbage in every output of the second run */
    zl_half *outs[] = {b2.h, b2.a, b2.y, b2.dh, b2.dW1, b2.db1, b2.dW2, b2.db2, b2.dx};
    size_t ns[] = {(size_t)R * H, (size_t)R * H, (size_t)R * D, (size_t)R * H, (size_t)D * H,
                   (size_t)H,     (size_t)D * H, (size_t)D,     (size_t)R * D};
    for (size_t i = 0; i < 9; i++) memset(outs[i], 0x7b, ns[i] * 2);
    zl_cpu_set_workspace(ws2 + 3, bytes); /* misaligned base */
    block16_forward(&b2);
    block16_backward(&b2);
    zl_half *o1[] = {b1.h, b1.a, b1.y, b1.dh, b1.dW1, b1.db1, b1.dW2, b1.db2, b1.dx};
    const char *names[] = {"h", "a", "y", "dh", "dW1", "db1", "dW2", "db2", "dx"};
    for (size_t i = 0; i < 9; i++) cr_assert(halves_equal(o1[i], outs[i], ns[i]), "%s differs between runs", names[i]);
    free(ws1);
    free(ws2);
    block16_free(&b1);
    block16_free(&b2);
}

Test(workspace, size_formula_is_sane) {
    /* by hand from the layout (64 to align the base; P_w 4·D², P_a 4·R·D, P_x and P_y R·D floats,
     * each rounded up to 64 bytes): R = 64, D = 256: 64 + 1048576 + 262144 + 2·65536; R = 5, D = 6:
     * 64 + 576 + 480 → 512 + 2·(120 → 128) */
    cr_assert_eq(zl_cpu_workspace_bytes(64, 256), (size_t)1441856);
    cr_assert_eq(zl_cpu_workspace_bytes(5, 6), (size_t)1408);
    cr_assert(zl_cpu_workspace_bytes(32, 256) < zl_cpu_workspace_bytes(64, 256));
    cr_assert(zl_cpu_workspace_bytes(64, 128) < zl_cpu_workspace_bytes(64, 256));
    /* at least the fp32 weight panel (4·D² floats) it needs; and modest (< 4 MiB at the demo size) */
    cr_assert(zl_cpu_workspace_bytes(64, 256) >= 4u * 256 * 256 * sizeof(float));
    cr_assert(zl_cpu_workspace_bytes(64, 256) < (4u << 20));
}

/* The advertised size must suffice for any base address. Malloc'ed blocks are always
 * 16-aligned, so here the workspace starts 1 byte past a 64-byte boundary (the worst
 * case for aligning it up) and is followed by a canary that must survive fwd + bwd.
 * Shapes with R·D·4 a multiple of 64 leave no rounding slack at the end. */
Test(workspace, exact_size_at_worst_alignment) {
    const int shapes[][2] = {{4, 16}, {16, 4}, {8, 32}, {5, 6}};
    enum { CANARY = 256 };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], D = shapes[s][1];
        block16 b;
        block16_init(&b, R, D, 450 + s);
        size_t bytes = zl_cpu_workspace_bytes(R, D);
        unsigned char *buf = malloc(bytes + 64 + CANARY);
        cr_assert(buf != NULL);
        unsigned char *ws = buf + ((65 - (uintptr_t)buf % 64) % 64);
        cr_assert((uintptr_t)ws % 64 == 1);
        memset(buf, 0xa5, bytes + 64 + CANARY);
        zl_cpu_set_workspace(ws, bytes);
        block16_forward(&b);
        block16_backward(&b);
        for (unsigned char *p = buf; p < ws; p++) cr_assert_eq(*p, 0xa5, "R=%d D=%d: write before workspace", R, D);
        for (size_t i = 0; i < CANARY && ws + bytes + i < buf + bytes + 64 + CANARY; i++)
            cr_assert_eq(ws[bytes + i], 0xa5, "R=%d D=%d: write %zu bytes past the advertised workspace", R, D, i);
        free(buf);
        block16_free(&b);
    }
}

/* A workspace one byte short must abort (the kernels never fall back to malloc).
 * The abort is checked with SIGABRT at its default action: a library may catch it at load time.
 * Ubuntu 22.04's MPICH loads libinfinipath (libmpich -> libfabric -> libpsm_infinipath), whose
 * constructor takes SIGABRT (and SIGSEGV, SIGBUS, SIGILL, SIGINT, SIGTERM) unless
 * IPATH_NO_BACKTRACE is set, prints a backtrace, writes a NAME.80s-PID,HOST.btr file in the current
 * directory and calls exit(1): the worker would end with status 1, never by the signal. */
static void sigabrt_default(void) { signal(SIGABRT, SIG_DFL); }
Test(workspace, too_small_aborts, .signal = SIGABRT, .init = sigabrt_default) {
    block16 b;
    block16_init(&b, 4, 8, 401);
    size_t bytes = zl_cpu_workspace_bytes(4, 8);
    void *ws = malloc(bytes);
    zl_cpu_set_workspace(ws, bytes - 1);
    block16_forward(&b);
}
Test(workspace, unset_aborts, .signal = SIGABRT, .init = sigabrt_default) {
    block16 b;
    block16_init(&b, 4, 8, 402);
    zl_cpu_set_workspace(NULL, 0);
    block16_backward(&b);
}

/* ==== MSE loss ===================================================================================== */

static double ref_mse(const double *y, const double *t, size_t n, double scale) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (y[i] - t[i]) * (y[i] - t[i]);
    return scale * s / (double)n;
}

static void check_mse(int R, int D, float loss_scale, uint64_t seed) {
    size_t n = (size_t)R * D;
    zl_half *y = half_alloc(n), *t = half_alloc(n), *dy = half_alloc(n);
    rng_seed(seed);
    fill_half_uniform(y, n, 2.0);
    fill_half_uniform(t, n, 2.0);
    float loss = -1;
    zl_cpu_mse_loss_backward(y, t, dy, &loss, R, D, loss_scale);
    double *yd = dbl_alloc(n), *td = dbl_alloc(n);
    half_to_dbl(yd, y, n), half_to_dbl(td, t, n);
    double L = ref_mse(yd, td, n, 1.0);
    cr_assert(fabs(loss - L) <= 1e-6 * L, "loss %.9g, ref %.9g", (double)loss, L);
    double *fd = dbl_alloc(n);
    for (size_t i = 0; i < n; i++) {
        double keep = yd[i], e = 1e-3;
        yd[i] = keep + e;
        double Lp = ref_mse(yd, td, n, loss_scale);
        yd[i] = keep - e;
        double Lm = ref_mse(yd, td, n, loss_scale);
        yd[i] = keep;
        fd[i] = (Lp - Lm) / (2 * e);
        double g = h2d(dy[i]);
        /* rounding of dy: half an ulp (the unit roundoff, relative) plus fp16's subnormal
         * spacing (bf16's is below 1e-39) */
        cr_assert(fabs(g - fd[i]) <= unit_roundoff() * fabs(fd[i]) * 1.01 + 0x1p-25 + 1e-9 * fabs(fd[i]),
                  "dy[%zu] = %.8g, finite difference %.8g", i, g, fd[i]);
    }
    double rel;
    cr_assert(grad_matches(dy, fd, n, &rel), "dy relative error %.3g", rel);
    check_comparator_rejects_wrong(dy, fd, n, "mse dy");
    free(yd), free(td), free(fd), free(y), free(t), free(dy);
}

Test(mse, loss_and_grad) {
    check_mse(3, 4, 1.0f, 501);
    check_mse(8, 32, 1024.0f, 502);
    check_mse(17, 16, 64.0f, 503);
}

/* ==== AdamW ======================================================================================== */

static void check_adam_steps(void) {
    const size_t n = 1000;
    zl_adam_hparams hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    const float grad_mult = 1.0f / (1024.0f * 4.0f);
    float *master = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    zl_half *param = half_alloc(n), *grad = half_alloc(n);
    double *M = dbl_alloc(n), *Mm = dbl_alloc(n), *Vv = dbl_alloc(n);
    double *Mabs = dbl_alloc(n); /* same recurrence on |g|: the scale of m's rounding error */
    rng_seed(601);
    for (size_t i = 0; i < n; i++) {
        master[i] = (float)rng_uniform(-0.5, 0.5);
        M[i] = master[i];
    }
    for (int t = 1; t <= 6; t++) {
        fill_half_uniform(grad, n, 100.0); /* loss-scaled gradients */
        if (t == 3) grad[7] = 0;           /* a zero gradient keeps m, v decaying */
        zl_cpu_adam_update(master, m, v, param, grad, n, grad_mult, t, hp);
        double b1 = hp.beta1, b2 = hp.beta2;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            double g = h2d(grad[i]) * (double)grad_mult;
            Mm[i] = b1 * Mm[i] + (1 - b1) * g;
            Mabs[i] = b1 * Mabs[i] + (1 - b1) * fabs(g);
            Vv[i] = b2 * Vv[i] + (1 - b2) * g * g;
            double upd = (Mm[i] / bc1) / (sqrt(Vv[i] / bc2) + (double)hp.eps) + (double)hp.weight_decay * M[i];
            M[i] -= (double)hp.lr * upd;
            cr_assert(fabs(master[i] - M[i]) <= 1e-5 * (fabs(M[i]) + hp.lr), "step %d master[%zu] = %.9g, ref %.9g",
                      t, i, (double)master[i], M[i]);
            cr_assert(fabs(m[i] - Mm[i]) <= 1e-5 * Mabs[i] + 1e-12, "step %d m[%zu]", t, i);
            cr_assert(fabs(v[i] - Vv[i]) <= 1e-5 * fabs(Vv[i]) + 1e-15, "step %d v[%zu]", t, i);
            cr_assert_eq(param[i], zl_storage_from_float(master[i]), "step %d param[%zu] is not round(master)", t,
                         i);
            cr_assert_eq(param[i], ref_round(master[i]), "step %d param[%zu] is not RNE(master)", t, i);
        }
    }
    /* the reference actually moved the parameters (so the comparison is not vacuous) */
    double moved = 0;
    rng_seed(601);
    for (size_t i = 0; i < n; i++) moved += fabs(M[i] - (double)(float)rng_uniform(-0.5, 0.5));
    cr_assert(moved / n > 5e-3, "parameters barely moved (%.3g)", moved / n);
    free(master), free(m), free(v), free(param), free(grad), free(M), free(Mm), free(Vv), free(Mabs);
}

Test(adam, matches_double_reference_over_steps) { check_adam_steps(); }
Test(adam, bf16_matches_double_reference_and_writes_bf16) {
    use_bf16();
    check_adam_steps();
}

/* First step with no weight decay: m̂/sqrt(v̂) = sign(g), so each weight moves by ~lr. */
Test(adam, first_step_is_sign_times_lr) {
    zl_adam_hparams hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    float master[4] = {0.5f, 0.5f, -0.25f, 1.0f}, m[4] = {0}, v[4] = {0};
    zl_half param[4], grad[4] = {zl_float_to_half(3.0f), zl_float_to_half(-0.01f), zl_float_to_half(100.0f),
                                 zl_float_to_half(-7.0f)};
    zl_cpu_adam_update(master, m, v, param, grad, 4, 1.0f, 1, hp);
    const float want[4] = {0.49f, 0.51f, -0.26f, 1.01f};
    for (int i = 0; i < 4; i++) cr_assert(fabsf(master[i] - want[i]) < 1e-6f, "master[%d] = %.9g", i, (double)master[i]);
}

/* ==== synthetic data ============================================================================== */

Test(data, deterministic_and_row_offset) {
    const int B = 24, D = 48;
    zl_half *x1 = half_alloc(2 * B * D), *t1 = half_alloc(2 * B * D), *x2 = half_alloc(2 * B * D),
            *t2 = half_alloc(2 * B * D);
    zl_cpu_data_generate(x1, t1, 77, 1000, 2 * B, D);
    zl_cpu_data_generate(x2, t2, 77, 1000, 2 * B, D);
    cr_assert(halves_equal(x1, x2, 2 * B * D) && halves_equal(t1, t2, 2 * B * D), "not deterministic");
    /* two ranks' halves of the global batch equal the combined batch */
    for (int r = 0; r < 2; r++) {
        zl_half *xs = half_alloc(B * D), *ts = half_alloc(B * D);
        zl_cpu_data_generate(xs, ts, 77, 1000 + (uint64_t)r * B, B, D);
        cr_assert(halves_equal(xs, x1 + r * B * D, B * D), "x rows of rank %d differ", r);
        cr_assert(halves_equal(ts, t1 + r * B * D, B * D), "target rows of rank %d differ", r);
        free(xs), free(ts);
    }
    /* a different seed or row0 gives different data */
    zl_cpu_data_generate(x2, t2, 78, 1000, 2 * B, D);
    int same = 0;
    for (int i = 0; i < 2 * B * D; i++) same += x1[i] == x2[i];
    cr_assert(same < 2 * B * D / 20, "seeds 77 and 78 share %d of %d values", same, 2 * B * D);
    zl_cpu_data_generate(x2, t2, 77, 1001, 2 * B, D);
    cr_assert(halves_equal(x2, x1 + D, (2 * B - 1) * D), "row0 = 1001 is not a shift by one row");
    free(x1), free(t1), free(x2), free(t2);
}

Test(data, statistics_and_teacher_formula) {
    const int R = 4096, D = 64;
    size_t n = (size_t)R * D;
    zl_half *x = half_alloc(n), *t = half_alloc(n);
    zl_cpu_data_generate(x, t, 5, 123456, R, D);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double v = h2d(x[i]);
        cr_assert(fabs(v) <= 131070.0 / 65536.0 + 1e-3, "x out of range: %g", v);
        s += v, s2 += v * v;
    }
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    /* standard error of the mean is 0.577/sqrt(262144) ≈ 0.0011 */
    cr_assert(fabs(mean) < 0.006, "mean %.4g", mean);
    cr_assert(fabs(sd - 1 / sqrt(3.0)) < 0.01, "std %.4g, want %.4g", sd, 1 / sqrt(3.0));

    int wrong_formula_fails = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < D; j++) {
            double x0 = h2d(x[i * D + j]), x1 = h2d(x[i * D + (j + 1) % D]), x2 = h2d(x[i * D + (j + 2) % D]);
            double want = x0 + 0.5 * (x1 > 0 ? x1 : 0) - 0.25 * x2;
            double got = h2d(t[i * D + j]);
            /* t rounds the exact value once; x0..x2 are each within 2^-11 relative of theirs */
            double tol = 0x1p-11 * (fabs(got) + fabs(x0) + 0.5 * fabs(x1) + 0.25 * fabs(x2)) * 1.01 + 0x1p-24;
            cr_assert(fabs(got - want) <= tol, "t[%d,%d] = %.8g, formula %.8g", i, j, got, want);
            /* the same check against a plausible wrong teacher (j-1 instead of j+1) must fail often */
            double xm = h2d(x[i * D + (j + D - 1) % D]);
            double bad = x0 + 0.5 * (xm > 0 ? xm : 0) - 0.25 * x2;
            wrong_formula_fails += fabs(got - bad) > tol;
        }
    cr_assert(wrong_formula_fails > R * D / 4, "tolerance too loose to tell the teacher apart");
    free(x), free(t);
}

/* ==== parameter init ================================================================================ */

Test(init, split_ranges_seeds_and_range) {
    const size_t n = 100003;
    const int sl = 4;
    zl_half *full = half_alloc(n), *part = half_alloc(n), *other = half_alloc(n);
    zl_cpu_init_uniform(full, n, 9, 0, sl);
    /* the same index range generated in three uneven pieces, as shards would */
    size_t cuts[] = {0, 17, 50001, n};
    for (int c = 0; c < 3; c++) zl_cpu_init_uniform(part + cuts[c], cuts[c + 1] - cuts[c], 9, cuts[c], sl);
    cr_assert(halves_equal(full, part, n), "split generation differs from one full call");
    zl_cpu_init_uniform(part, 10, 9, 500, sl);
    cr_assert(halves_equal(part, full + 500, 10), "value depends on more than (seed, index)");

    zl_cpu_init_uniform(other, n, 10, 0, sl);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += full[i] == other[i];
    cr_assert(same < n / 100, "seeds 9 and 10 share %zu of %zu values", same, n);

    const double bound = ldexp(1.0, -sl);
    double s = 0, s2 = 0, vmin = 1, vmax = -1;
    for (size_t i = 0; i < n; i++) {
        double v = h2d(full[i]);
        cr_assert(fabs(v) <= bound, "init value %g outside [-%g, %g]", v, bound, bound);
        s += v, s2 += v * v;
        vmin = v < vmin ? v : vmin, vmax = v > vmax ? v : vmax;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    cr_assert(fabs(mean) < 0.01 * bound, "mean %g", mean);
    cr_assert(fabs(var - bound * bound / 3) < 0.02 * bound * bound / 3, "variance %g, want %g", var, bound * bound / 3);
    cr_assert(vmin < -0.99 * bound && vmax > 0.99 * bound, "values do not span the range");
    free(full), free(part), free(other);
}

/* dx = NULL (block 0) skips the input gradient and changes nothing else. */
/* Two blocks with the same inputs (seed), workspace set: b1 through forward and the plain
 * backward (the reference), b2 through forward only, for a variant backward. Returns the workspace. */
static void *twin_blocks(block16 *b1, block16 *b2, int R, int D, uint64_t seed) {
    block16_init(b1, R, D, seed);
    block16_init(b2, R, D, seed);
    size_t bytes = zl_cpu_workspace_bytes(R, D);
    void *ws = malloc(bytes);
    cr_assert(ws);
    zl_cpu_set_workspace(ws, bytes);
    block16_forward(b1);
    block16_backward(b1);
    block16_forward(b2);
    return ws;
}

static void expect_same_weight_gradients(const block16 *b1, const block16 *b2, int D) {
    cr_assert(halves_equal(b1->dW1, b2->dW1, (size_t)D * 4 * D));
    cr_assert(halves_equal(b1->dW2, b2->dW2, (size_t)D * 4 * D));
    cr_assert(halves_equal(b1->db1, b2->db1, (size_t)4 * D));
    cr_assert(halves_equal(b1->db2, b2->db2, (size_t)D));
}

Test(block, null_dx_gives_same_weight_gradients) {
    const int R = 7, D = 12;
    block16 b1, b2;
    void *ws = twin_blocks(&b1, &b2, R, D, 401);
    zl_cpu_block_backward(b2.x, b2.h, b2.a, b2.W1, b2.W2, b2.dy, b2.dh, b2.dW1, b2.db1, b2.dW2, b2.db2, NULL,
                          ZL_GRADS_WRITE, R, D);
    expect_same_weight_gradients(&b1, &b2, D);
    free(ws);
    block16_free(&b1);
    block16_free(&b2);
}

/* The MLP hands backward a's buffer as dh (mlp.c): a must be read before dh is written. */
Test(block, dh_may_alias_a) {
    const int R = 7, D = 12;
    block16 b1, b2;
    void *ws = twin_blocks(&b1, &b2, R, D, 402);
    zl_cpu_block_backward(b2.x, b2.h, b2.a, b2.W1, b2.W2, b2.dy, b2.a, b2.dW1, b2.db1, b2.dW2, b2.db2, b2.dx,
                          ZL_GRADS_WRITE, R, D);
    expect_same_weight_gradients(&b1, &b2, D);
    cr_assert(halves_equal(b1.dx, b2.dx, (size_t)R * D));
    cr_assert(halves_equal(b1.dh, b2.a, (size_t)R * 4 * D)); /* a's buffer now holds dh */
    free(ws);
    block16_free(&b1);
    block16_free(&b2);
}

/* ==== gradient accumulation and recompute (--accum, the activation policies) ======================== */

static void *set_workspace(int R, int D) {
    size_t bytes = zl_cpu_workspace_bytes(R, D);
    void *ws = malloc(bytes);
    cr_assert(ws);
    zl_cpu_set_workspace(ws, bytes);
    return ws;
}

static void backward_into(block16 *b, int row0, int rows, zl_half *dW1, zl_half *db1, zl_half *dW2, zl_half *db2,
                          zl_grads_mode mode) {
    size_t D = (size_t)b->D, H = (size_t)b->H, r = (size_t)row0;
    zl_cpu_block_backward(b->x + r * D, b->h + r * H, b->a + r * H, b->W1, b->W2, b->dy + r * D, b->dh, dW1, db1, dW2,
                          db2, NULL, mode, rows, b->D);
}

/* ADD onto zeros is WRITE: 0 + g is g exactly, rounded once either way. */
Test(accumulate, add_onto_zero_equals_write) {
    const int R = 6, D = 8;
    block16 b;
    block16_init(&b, R, D, 411);
    void *ws = set_workspace(R, D);
    block16_forward(&b);
    size_t DH = (size_t)D * 4 * D, H = (size_t)4 * D;
    zl_half *g[4] = {half_alloc(DH), half_alloc(H), half_alloc(DH), half_alloc((size_t)D)};
    size_t n[4] = {DH, H, DH, (size_t)D};
    for (int i = 0; i < 4; i++) memset(g[i], 0, n[i] * 2);
    backward_into(&b, 0, R, b.dW1, b.db1, b.dW2, b.db2, ZL_GRADS_WRITE);
    backward_into(&b, 0, R, g[0], g[1], g[2], g[3], ZL_GRADS_ADD);
    cr_assert(halves_equal(g[0], b.dW1, DH) && halves_equal(g[1], b.db1, H));
    cr_assert(halves_equal(g[2], b.dW2, DH) && halves_equal(g[3], b.db2, (size_t)D));
    for (int i = 0; i < 4; i++) free(g[i]);
    free(ws);
    block16_free(&b);
}

/* Two micro-batches of R/2 rows: WRITE the first, ADD the second. Each element must be the
 * sum of the two halves' gradients (each computed alone with WRITE) to within the two
 * roundings accumulation adds: |acc - (g1 + g2)| <= 2^-10·(|g1| + |g2|) in fp16. */
Test(accumulate, two_micro_batches_sum_their_gradients) {
    const int R = 10, D = 12, r = R / 2;
    block16 b;
    block16_init(&b, R, D, 412);
    void *ws = set_workspace(R, D);
    block16_forward(&b);
    size_t DH = (size_t)D * 4 * D, H = (size_t)4 * D;
    size_t n[4] = {DH, H, DH, (size_t)D};
    zl_half *acc[4], *g1[4], *g2[4];
    for (int i = 0; i < 4; i++) acc[i] = half_alloc(n[i]), g1[i] = half_alloc(n[i]), g2[i] = half_alloc(n[i]);
    backward_into(&b, 0, r, g1[0], g1[1], g1[2], g1[3], ZL_GRADS_WRITE);
    backward_into(&b, r, r, g2[0], g2[1], g2[2], g2[3], ZL_GRADS_WRITE);
    backward_into(&b, 0, r, acc[0], acc[1], acc[2], acc[3], ZL_GRADS_WRITE);
    backward_into(&b, r, r, acc[0], acc[1], acc[2], acc[3], ZL_GRADS_ADD);
    int changed = 0;
    for (int i = 0; i < 4; i++)
        for (size_t k = 0; k < n[i]; k++) {
            double a = zl_half_to_float(g1[i][k]), c = zl_half_to_float(g2[i][k]), got = zl_half_to_float(acc[i][k]);
            cr_assert(fabs(got - (a + c)) <= ldexp(fabs(a) + fabs(c), -10) + 1e-7,
                      "tensor %d [%zu]: %.8g + %.8g accumulated to %.8g", i, k, a, c, got);
            changed += got != a;
        }
    cr_assert_gt(changed, 0, "the second micro-batch added nothing");
    for (int i = 0; i < 4; i++) free(acc[i]), free(g1[i]), free(g2[i]);
    free(ws);
    block16_free(&b);
}

/* dst += src rounds the fp32 sum once, to nearest even. */
Test(accumulate, add_into_rounds_once_to_nearest_even) {
    const float d[] = {1.0f, 2048.0f, -1.0f, 0.5f, 3.0f, 3.0f};
    const float s_[] = {0x1p-11f, 1.0f, 1.0f, 0.25f, 0x1.8p-11f, 0x1.8p-10f};
    /* ties go to even; at 3 an ulp is 2^-9: 0.75·2^-10 rounds down, 1.5·2^-10 up */
    const float want[] = {1.0f, 2048.0f, 0.0f, 0.75f, 3.0f, 3.0f + 0x1p-9f};
    zl_half dst[6], src[6];
    for (int i = 0; i < 6; i++) dst[i] = zl_float_to_half(d[i]), src[i] = zl_float_to_half(s_[i]);
    zl_cpu_add_into(dst, src, 6);
    for (int i = 0; i < 6; i++) cr_expect_eq(zl_half_to_float(dst[i]), want[i], "%g + %g", d[i], s_[i]);
}

/* Forward with y = NULL (the recompute of a checkpointed block) writes the same h and a and
 * leaves y alone; gelu of the stored h is within one rounding of forward's a (which is gelu
 * of the unrounded h). */
Test(recompute, forward_without_output_and_gelu_of_stored_h) {
    const int R = 5, D = 8;
    block16 b;
    block16_init(&b, R, D, 413);
    void *ws = set_workspace(R, D);
    size_t RH = (size_t)R * 4 * D, RD = (size_t)R * D;
    block16_forward(&b);
    zl_half *h = half_alloc(RH), *a = half_alloc(RH), *y = half_alloc(RD), *a2 = half_alloc(RH);
    memset(y, 0x5a, RD * 2);
    zl_cpu_block_forward(b.x, b.W1, b.b1, b.W2, b.b2, h, a, NULL, R, D);
    cr_assert(halves_equal(h, b.h, RH) && halves_equal(a, b.a, RH));
    zl_cpu_block_forward(b.x, b.W1, b.b1, b.W2, b.b2, h, a, y, R, D);
    cr_assert(halves_equal(y, b.y, RD), "the y of a full forward");
    zl_cpu_gelu_stored(b.h, a2, RH);
    for (size_t i = 0; i < RH; i++) {
        double f = zl_half_to_float(b.a[i]), g = zl_half_to_float(a2[i]), hv = zl_half_to_float(b.h[i]);
        cr_assert(fabs(f - g) <= ldexp(fabs(f), -9) + 1e-6, "h = %.6g: forward a %.8g, recomputed %.8g", hv, f, g);
        cr_assert(fabs(g - ref_gelu(hv)) <= ldexp(fabs(g), -10) + 1e-6, "gelu(%.6g) = %.8g, reference %.8g", hv, g,
                  ref_gelu(hv));
    }
    free(h), free(a), free(y), free(a2);
    free(ws);
    block16_free(&b);
}

/* ==== the kernels in bf16 ============================================================================ */

Test(block_forward_bf16, shapes) {
    use_bf16();
    check_forward(1, 1, 11);
    check_forward(5, 6, 13);
    check_forward(9, 20, 22);
    check_forward(32, 64, 31);
}

Test(block_backward_bf16, finite_differences) {
    use_bf16();
    check_backward_fd(3, 4, 101);
    check_backward_fd(6, 16, 103);
}

Test(block_backward_bf16, analytic_tile_shapes) {
    use_bf16();
    check_backward_analytic(9, 20, 202);
    check_backward_analytic(37, 48, 203);
}

Test(mse_bf16, loss_and_grad) {
    use_bf16();
    check_mse(8, 32, 1.0f, 502);
    check_mse(17, 16, 64.0f, 503);
}

/* bf16 data and init are the documented exact values rounded once to bf16 (not via fp16). */
Test(data_bf16, values_are_the_exact_values_rounded_once) {
    use_bf16();
    const int R = 64, D = 24;
    zl_half *x = half_alloc((size_t)R * D), *t = half_alloc((size_t)R * D);
    zl_cpu_data_generate(x, t, 5, 77, R, D);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < D; j++) {
            float exact = (float)zl_sample_int(5, 77 + (uint64_t)i, (uint64_t)j, (uint64_t)D) * 0x1p-16f;
            cr_assert_eq(x[i * D + j], ref_f2bf(exact), "x[%d,%d]", i, j);
        }
    const size_t n = 4096;
    zl_half *w = half_alloc(n);
    zl_cpu_init_uniform(w, n, 9, 1000, 3);
    for (size_t i = 0; i < n; i++) {
        int32_t r = (int32_t)(zl_hash2(9 ^ ZL_STREAM_PARAM, 1000 + i) >> 48) - 32768;
        cr_assert_eq(w[i], ref_f2bf((float)ldexp((double)r, -15 - 3)), "init[%zu]", i);
    }
    free(x), free(t), free(w);
}
