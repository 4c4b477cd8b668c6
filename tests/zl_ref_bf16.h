/* zl_ref_bf16.h — the independent bf16 reference, written from the format's definition (1 sign,
 * 8 exponent, 7 fraction bits), not from the code under test: the unit tests check it against
 * cases worked out by hand (test_kernels.c) and hold the kernels to it; the checkpoint tests hold
 * zlckpt's bf16 export to it (test_ckpt.c).
 *
 * The value from its fields; NaN and inf are left to the callers. Rounding: the largest pattern
 * not above |f| (binary search over the finite patterns, whose values grow with the pattern), then
 * the nearer of it and the next one in double arithmetic, a tie going to the even pattern; past
 * the largest finite bf16 the "next" is 2^128, which stands for inf. */
#ifndef ZL_REF_BF16_H
#define ZL_REF_BF16_H

#include <math.h>
#include <stdint.h>

static inline double ref_bf16_value(uint16_t b) {
    int e = (b >> 7) & 0xff, m = b & 0x7f;
    double v = e ? ldexp(128.0 + m, e - 127 - 7) : ldexp((double)m, -126 - 7);
    return (b & 0x8000u) ? -v : v;
}
static inline double ref_bf16_magnitude(uint16_t p) { return p == 0x7f80u ? 0x1p128 : ref_bf16_value(p); }
static inline uint16_t ref_f2bf(float f) {
    uint16_t sign = signbit(f) ? 0x8000u : 0;
    if (isinf(f)) return sign | 0x7f80u;
    double a = fabs((double)f);
    uint16_t lo = 0, hi = 0x7f80u; /* invariant: value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (ref_bf16_magnitude(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = a - ref_bf16_magnitude(lo), dhi = ref_bf16_magnitude(hi) - a;
    uint16_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | pick;
}

#endif
