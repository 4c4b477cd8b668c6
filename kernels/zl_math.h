/* zl_math.h — bit-exact helpers shared by the CPU and CUDA backends.
 *
 * Everything here is integer arithmetic or exactly representable float arithmetic,
 * so host and device produce the same bits: fp16 and bf16 rounding (round to nearest
 * even), the counter-based RNG, synthetic samples, teacher targets and parameter init.
 * Included by C files and by .cu files (ZL_HD adds __host__ __device__ there). */
#ifndef ZL_MATH_H
#define ZL_MATH_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZL_HD __host__ __device__ __forceinline__
#else
#define ZL_HD static inline
#endif

/* A stored 16-bit value, as its bits: IEEE 754 binary16 (fp16) or bfloat16 (bf16), whichever
 * the storage format says (kernels.h); functions below that produce one take `int bf16`. */
typedef uint16_t zl_half;

ZL_HD uint32_t zl_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
ZL_HD float zl_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* float -> binary16, round to nearest, ties to even. Overflow -> ±inf, NaN stays NaN
 * (quiet, payload's top bits kept), tiny values -> subnormals or ±0. */
ZL_HD zl_half zl_float_to_half(float f) {
    uint32_t x = zl_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xffu) /* inf or NaN */
        return (zl_half)(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0u));
    int32_t e = (int32_t)exp - 127 + 15; /* rebias */
    if (e >= 31) return (zl_half)(sign | 0x7c00u); /* overflow -> inf */
    if (e <= 0) {                                   /* subnormal half or zero */
        if (e < -10) return (zl_half)sign;          /* below half the smallest subnormal */
        man |= 0x800000u;                           /* implicit leading one */
        uint32_t shift = (uint32_t)(14 - e);        /* 14..24 */
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half_ulp = 1u << (shift - 1);
        h += (uint32_t)(rem > half_ulp) | ((uint32_t)(rem == half_ulp) & h & 1u); /* branch-free RNE */
        return (zl_half)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    /* round to nearest even, branch-free (unpredictable branches cost ~15% of a CPU step);
     * a carry into the exponent, up to inf, is the correct result */
    h += (uint32_t)(rem > 0x1000u) | ((uint32_t)(rem == 0x1000u) & h & 1u);
    return (zl_half)(sign | h);
}

/* binary16 -> float, exact. */
ZL_HD float zl_half_to_float(zl_half h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t man = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu) return zl_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return zl_bits_f32(sign);
        /* subnormal: value = man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return zl_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* float -> bfloat16 (float's top 16 bits: sign, 8 exponent bits, 7 mantissa bits), round
 * to nearest, ties to even. bf16 has float's exponent range, so subnormal floats round to
 * bf16 subnormals by the same rule, and only values ≥ the largest bf16 plus half an ulp
 * overflow: the rounding carry then runs into the exponent and gives ±inf, the correct
 * result. NaN stays NaN (quiet bit set, sign and top payload kept): rounding a NaN's
 * mantissa could carry it into inf or clear it to inf. */
ZL_HD zl_half zl_float_to_bf16(float f) {
    uint32_t x = zl_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (zl_half)((x >> 16) | 0x0040u);
    /* add just under half an ulp (0x7fff), plus one more when the kept part is odd: a tie
     * then carries exactly when the kept part is odd, which makes it even */
    return (zl_half)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* bfloat16 -> float, exact (the bits are float's top half). */
ZL_HD float zl_bf16_to_float(zl_half b) { return zl_bits_f32((uint32_t)b << 16); }

/* The storage format's rounding and widening: bf16 = 0 for fp16, 1 for bf16. */
ZL_HD zl_half zl_round_storage(float f, int bf16) { return bf16 ? zl_float_to_bf16(f) : zl_float_to_half(f); }
ZL_HD float zl_widen_storage(zl_half v, int bf16) { return bf16 ? zl_bf16_to_float(v) : zl_half_to_float(v); }

/* splitmix64 finaliser: a counter-based RNG, value = f(seed, counter). */
ZL_HD uint64_t zl_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
ZL_HD uint64_t zl_hash2(uint64_t seed, uint64_t counter) {
    return zl_mix64(zl_mix64(seed) ^ counter);
}

/* Domain separation so data and parameters never share random streams. */
#define ZL_STREAM_DATA 0x6461746164617461ull  /* "datadata" */
#define ZL_STREAM_PARAM 0x706172616d706172ull /* "paramspar" */

/* The data stream's key: the half of zl_hash2 that depends on the seed alone, so that a
 * kernel drawing many samples of one seed mixes it once (zl_sample_int_keyed). */
ZL_HD uint64_t zl_data_key(uint64_t seed) { return zl_mix64(seed ^ ZL_STREAM_DATA); }

/* Centered Irwin–Hall sum of four 16-bit uniforms: an integer in [-131070, 131070],
 * roughly normal with standard deviation 2^16/sqrt(3). `index` is row * dim + col. */
ZL_HD int32_t zl_sample_int_keyed(uint64_t key, uint64_t index) {
    uint64_t h = zl_mix64(key ^ index);
    int32_t s = (int32_t)(h & 0xffff) + (int32_t)((h >> 16) & 0xffff) + (int32_t)((h >> 32) & 0xffff) +
                (int32_t)(h >> 48);
    return s - 131070;
}
ZL_HD int32_t zl_sample_int(uint64_t seed, uint64_t row, uint64_t col, uint64_t dim) {
    return zl_sample_int_keyed(zl_data_key(seed), row * dim + col);
}

/* Input x[row][col] = c * 2^-16 (exact in float), then rounded to the storage format. */
ZL_HD zl_half zl_x_of_sample(int32_t c, int bf16) { return zl_round_storage((float)c * 1.52587890625e-05f, bf16); }
ZL_HD zl_half zl_sample_x(uint64_t seed, uint64_t row, uint64_t col, uint64_t dim, int bf16) {
    return zl_x_of_sample(zl_sample_int(seed, row, col, dim), bf16);
}

/* The fixed teacher: t_j = x_j + 0.5*relu(x_{j+1}) - 0.25*x_{j+2} (indices mod dim),
 * evaluated on the exact integers (numerator < 2^21, so the float is exact), then
 * rounded to the storage format. The residual t - x is a small nonlinear map an MLP block can learn. */
ZL_HD zl_half zl_target_of_samples(int32_t c0, int32_t c1, int32_t c2, int bf16) {
    int32_t num = 4 * c0 + 2 * (c1 > 0 ? c1 : 0) - c2; /* in units of 2^-18 */
    return zl_round_storage((float)num * 3.814697265625e-06f, bf16);
}
ZL_HD zl_half zl_sample_target(uint64_t seed, uint64_t row, uint64_t col, uint64_t dim, int bf16) {
    return zl_target_of_samples(zl_sample_int(seed, row, col, dim), zl_sample_int(seed, row, (col + 1) % dim, dim),
                                zl_sample_int(seed, row, (col + 2) % dim, dim), bf16);
}

/* Parameter init: uniform integer in [-2^15, 2^15) times 2^-(15+scale_log2), rounded to
 * the storage format. A function of (seed, global unpadded parameter index) only, never
 * of N or rank. */
ZL_HD zl_half zl_init_value(uint64_t seed, uint64_t index, int scale_log2, int bf16) {
    uint64_t h = zl_hash2(seed ^ ZL_STREAM_PARAM, index);
    int32_t r = (int32_t)(h >> 48) - 32768;
    float v = (float)r * 3.0517578125e-05f; /* 2^-15, exact */
    for (int i = 0; i < scale_log2; i++) v *= 0.5f; /* exact powers of two */
    return zl_round_storage(v, bf16);
}

#endif
