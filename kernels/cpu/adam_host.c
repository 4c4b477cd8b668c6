/* adam_host.c — the vectorised host Adam (see adam_host.h): 8 elements per AVX2 step, the
 * reference (zl_cpu_adam_update) for the tail and on CPUs without AVX2 / F16C.
 *
 * Why bitwise: each lane runs the reference's expression tree — g = widen(grad)·grad_mult,
 * m = b1·m + (1−b1)·g, v = b2·v + ((1−b2)·g)·g, w −= lr·(m/bc1 / (√(v/bc2) + eps) + wd·w) —
 * with the same operand order, one rounding per operation (no FMA: the target below does
 * not enable it, and the build uses -ffp-contract=off) and the same bias corrections (the
 * reference's own powf expression, per call). vdivps and vsqrtps are correctly rounded like
 * divss and sqrtss. The conversions are where hardware may differ from zl_math.h: F16C
 * quiets a signalling NaN when it widens (the reference keeps the bits), so NaN/inf lanes
 * are rebuilt with integer ops; rounding (vcvtps2ph, round to nearest even) matches the
 * reference on every float, NaNs included (tests/test_host_adam.c, bench/host_adam.c
 * --verify-all). bf16 needs no F16C: its conversions are shifts and an integer round. */
#include "adam_host.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZL_HOST_X86 1
#endif

static int storage_is_bf16(void) { return zl_kernels_dtype() == ZL_BF16; }

#ifdef ZL_HOST_X86
#define ZL_AVX2 __attribute__((target("avx2,f16c")))

/* ---- 8 conversions at a time (exactly zl_math.h's) ------------------------------------- */

ZL_AVX2 static inline __m256 widen_f16x8(const zl_half *src) {
    __m128i h = _mm_loadu_si128((const __m128i *)src);
    __m256 f = _mm256_cvtph_ps(h);
    __m256i h32 = _mm256_cvtepu16_epi32(h);
    /* exponent all ones (inf, NaN): sign | 0x7f800000 | mantissa << 13, the reference's bits
     * (F16C would set a signalling NaN's quiet bit) */
    __m256i top = _mm256_set1_epi32(0x7c00);
    __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, top), top);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16);
    __m256i body = _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7fff)), 13),
                                    _mm256_set1_epi32(0x70000000)); /* 0x0f800000 + 0x70000000 */
    __m256 exact = _mm256_castsi256_ps(_mm256_or_si256(sign, body));
    return _mm256_blendv_ps(f, exact, _mm256_castsi256_ps(special));
}

ZL_AVX2 static inline void round_f16x8(zl_half *dst, __m256 x) {
    _mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

ZL_AVX2 static inline __m256 widen_bf16x8(const zl_half *src) {
    __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src));
    return _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
}

/* zl_float_to_bf16 lane by lane: add 0x7fff plus the kept part's low bit, keep the top half;
 * a NaN keeps its top half with the quiet bit set. */
ZL_AVX2 static inline void round_bf16x8(zl_half *dst, __m256 f) {
    __m256i x = _mm256_castps_si256(f);
    __m256i one = _mm256_set1_epi32(1);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000)); /* both sides ≥ 0: signed compare is fine */
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x0040));
    r = _mm256_blendv_epi8(r, quiet, nan);
    /* 8 × u32 (each ≤ 0xffff) -> 8 × u16: pack within 128-bit lanes, then gather qwords 0 and 2 */
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(p));
}

/* ---- the update -------------------------------------------------------------------------- */

/* One body for both formats (bf16 is a compile-time constant after inlining). Returns how
 * many elements it did (a multiple of 8); the caller runs the reference on the rest. */
ZL_AVX2 static inline size_t adam_avx2(float *master, float *m, float *v, zl_half *param, const zl_half *grad,
                                       size_t n, float grad_mult, float bc1, float bc2, zl_adam_hparams hp,
                                       const int bf16) {
    const __m256 gm = _mm256_set1_ps(grad_mult);
    const __m256 b1 = _mm256_set1_ps(hp.beta1), one_b1 = _mm256_set1_ps(1.0f - hp.beta1);
    const __m256 b2 = _mm256_set1_ps(hp.beta2), one_b2 = _mm256_set1_ps(1.0f - hp.beta2);
    const __m256 c1 = _mm256_set1_ps(bc1), c2 = _mm256_set1_ps(bc2);
    const __m256 lr = _mm256_set1_ps(hp.lr), eps = _mm256_set1_ps(hp.eps), wd = _mm256_set1_ps(hp.weight_decay);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_mul_ps(bf16 ? widen_bf16x8(grad + i) : widen_f16x8(grad + i), gm);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(one_b1, g));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 mhat = _mm256_div_ps(mi, c1);
        __m256 vhat = _mm256_div_ps(vi, c2);
        __m256 w = _mm256_loadu_ps(master + i);
        __m256 step = _mm256_add_ps(_mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps)), _mm256_mul_ps(wd, w));
        w = _mm256_sub_ps(w, _mm256_mul_ps(lr, step));
        _mm256_storeu_ps(master + i, w);
        if (bf16)
            round_bf16x8(param + i, w);
        else
            round_f16x8(param + i, w);
    }
    return i;
}

ZL_AVX2 static size_t adam_avx2_f16(float *master, float *m, float *v, zl_half *param, const zl_half *grad,
                                    size_t n, float grad_mult, float bc1, float bc2, zl_adam_hparams hp) {
    return adam_avx2(master, m, v, param, grad, n, grad_mult, bc1, bc2, hp, 0);
}
ZL_AVX2 static size_t adam_avx2_bf16(float *master, float *m, float *v, zl_half *param, const zl_half *grad,
                                     size_t n, float grad_mult, float bc1, float bc2, zl_adam_hparams hp) {
    return adam_avx2(master, m, v, param, grad, n, grad_mult, bc1, bc2, hp, 1);
}

ZL_AVX2 static size_t widen_avx2(float *dst, const zl_half *src, size_t n, int bf16) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16 ? widen_bf16x8(src + i) : widen_f16x8(src + i));
    return i;
}
ZL_AVX2 static size_t round_avx2(zl_half *dst, const float *src, size_t n, int bf16) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (bf16)
            round_bf16x8(dst + i, _mm256_loadu_ps(src + i));
        else
            round_f16x8(dst + i, _mm256_loadu_ps(src + i));
    }
    return i;
}

/* AVX2 for both formats, F16C too for fp16. libgcc fills in the CPU model (OS support for
 * the YMM state included) in a constructor, so this is a load and a test, safe from any thread. */
static int simd_usable(int bf16) {
    return __builtin_cpu_supports("avx2") && (bf16 || __builtin_cpu_supports("f16c"));
}
#else
static int simd_usable(int bf16) { (void)bf16; return 0; }
#endif

/* ---- entry points ------------------------------------------------------------------------ */

void zl_host_adam_update(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                         float grad_mult, int t, zl_adam_hparams hp) {
    const int bf = storage_is_bf16();
    size_t done = 0;
#ifdef ZL_HOST_X86
    if (simd_usable(bf)) {
        /* the reference's bias corrections, the same expression */
        const float bc1 = 1.0f - powf(hp.beta1, (float)t);
        const float bc2 = 1.0f - powf(hp.beta2, (float)t);
        done = bf ? adam_avx2_bf16(master, m, v, param, grad, n, grad_mult, bc1, bc2, hp)
                  : adam_avx2_f16(master, m, v, param, grad, n, grad_mult, bc1, bc2, hp);
    }
#endif
    if (done < n)
        zl_cpu_adam_update(master + done, m + done, v + done, param + done, grad + done, n - done, grad_mult, t, hp);
}

void zl_host_widen_array(float *dst, const zl_half *src, size_t n) {
    const int bf = storage_is_bf16();
    size_t i = 0;
#ifdef ZL_HOST_X86
    if (simd_usable(bf)) i = widen_avx2(dst, src, n, bf);
#endif
    for (; i < n; i++) dst[i] = zl_widen_storage(src[i], bf);
}

void zl_host_round_array(zl_half *dst, const float *src, size_t n) {
    const int bf = storage_is_bf16();
    size_t i = 0;
#ifdef ZL_HOST_X86
    if (simd_usable(bf)) i = round_avx2(dst, src, n, bf);
#endif
    for (; i < n; i++) dst[i] = zl_round_storage(src[i], bf);
}

const char *zl_host_simd_name(void) {
    if (!simd_usable(storage_is_bf16())) return "scalar";
    return storage_is_bf16() ? "avx2" : "avx2+f16c";
}

/* ZL_HOST_ADAM_CHUNK-element chunks in n elements (the last may be shorter). */
static size_t chunk_count(size_t n) { return (n + ZL_HOST_ADAM_CHUNK - 1) / ZL_HOST_ADAM_CHUNK; }

/* No more threads than chunks. A thread without work still joins the team and its closing
 * barrier, and where every core is taken (each rank's team, the ranks' main threads, NCCL's
 * proxies) one descheduled thread holds the call for a scheduler tick: a 4,176-element unit
 * took 4–16 ms with 32 threads a rank (2 ranks, 64-core GPU host), where the update is µs. */
int zl_host_adam_team(size_t n, int threads) {
    size_t chunks = chunk_count(n);
    if (threads < 1) threads = 1;
    int team = chunks < (size_t)threads ? (int)chunks : threads;
    return team > 1 ? team : 1;
}

void zl_host_adam_update_threads(float *master, float *m, float *v, zl_half *param, const zl_half *grad, size_t n,
                                 float grad_mult, int t, zl_adam_hparams hp, int threads) {
    long chunks = (long)chunk_count(n);
    int team = zl_host_adam_team(n, threads);
#pragma omp parallel for num_threads(team) if (team > 1) schedule(static)
    for (long k = 0; k < chunks; k++) {
        size_t i = (size_t)k * ZL_HOST_ADAM_CHUNK, len = n - i < ZL_HOST_ADAM_CHUNK ? n - i : ZL_HOST_ADAM_CHUNK;
        zl_host_adam_update(master + i, m + i, v + i, param + i, grad + i, len, grad_mult, t, hp);
    }
}
