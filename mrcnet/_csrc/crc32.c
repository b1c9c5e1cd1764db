/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the ICRC's CRC, equal to zlib's
 * crc32(). zlib spends about 1.3 cycles per byte here, which made the ICRC 90% of the cost
 * of a 9000-byte frame; carry-less multiplication (PCLMULQDQ) folds 64 bytes per step at
 * about 0.1 cycle per byte, and its AVX-512 form (VPCLMULQDQ, four 128-bit lanes per
 * instruction) 256 bytes per step at about a quarter of that. Algorithm and constants:
 * Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Intel, 2009), as in Linux (arch/x86/crypto/crc32-pclmul_asm.S) and
 * Chromium's zlib (crc32_simd.c). A fold over D bits multiplies by x^(D+32) mod P (the
 * lower 64 bits of a 128-bit lane) and x^(D-32) mod P (the upper), each bit-reflected and
 * shifted left by one. A slicing-by-8 table does short inputs, tails, and CPUs without
 * PCLMULQDQ. */
#include "icrc.h"

#include "checksum.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86_CLMUL 1
#endif

static uint32_t table[8][256];
/* The code in use (mrc_crc32_impl): 0 the table, 1 PCLMULQDQ, 2 VPCLMULQDQ as well. */
static int use_clmul;

/* "Raw" state: no pre/post inversion. zlib's crc32(c, p, n) == ~raw(~c, p, n). */
static uint32_t raw_table(uint32_t c, const uint8_t *p, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
            table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
            table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#ifdef HAVE_X86_CLMUL
/* A 16-byte block of the input at p + off, stored to dst + off as well when dst is set:
 * the fold loads every block once, so a copy made here costs only the stores. */
__attribute__((target("pclmul,sse4.1"), always_inline))
static inline __m128i load_block(const uint8_t *p, uint8_t *dst, size_t off)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(p + off));
    if (dst)
        _mm_storeu_si128((__m128i *)(dst + off), x);
    return x;
}

/* The last step of either fold: the state x1 (128 bits, the 128-bit lane of everything
 * before p) takes the n remaining bytes (a multiple of 16) a 16-byte block at a time,
 * then is reduced to the 32-bit raw CRC: 128 -> 64 bits, then 64 -> 32 by a Barrett
 * reduction. */
__attribute__((target("pclmul,sse4.1"), always_inline))
static inline uint32_t fold_tail(__m128i x1, const uint8_t *p, uint8_t *dst, size_t n)
{
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x0 = k3k4, x2, x5;

    while (n >= 16) {
        x2 = load_block(p, dst, 0);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16;
        dst = dst ? dst + 16 : dst;
        n -= 16;
    }

    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, k5k0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

/* Folds n bytes (n >= 64, a multiple of 16) into the raw state c, copying them to dst on
 * the way when dst is not NULL, and reading the first 64 from `first` instead of p when
 * that is not NULL (inlined into the callers below, so each has no test per block). */
__attribute__((target("pclmul,sse4.1"), always_inline))
static inline uint32_t fold_clmul(uint32_t c, const uint8_t *p, uint8_t *dst, size_t n,
                                  const uint8_t *first)
{
    /* D = 512 (k1k2: four lanes apart) and D = 128 (k3k4: the next lane). */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;

    const uint8_t *f = first ? first : p;
    x1 = load_block(f, dst, 0x00);
    x2 = load_block(f, dst, 0x10);
    x3 = load_block(f, dst, 0x20);
    x4 = load_block(f, dst, 0x30);
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    p += 64;
    dst = dst ? dst + 64 : dst;
    n -= 64;

    /* Four independent 128-bit lanes, each folded 512 bits forward per step. */
    x0 = k1k2;
    while (n >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5),
                           load_block(p, dst, 0x00));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6),
                           load_block(p, dst, 0x10));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7),
                           load_block(p, dst, 0x20));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8),
                           load_block(p, dst, 0x30));
        p += 64;
        dst = dst ? dst + 64 : dst;
        n -= 64;
    }

    /* Fold the four lanes into one, then any remaining 16-byte blocks (fold_tail). */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    return fold_tail(x1, p, dst, n);
}

/* A 64-byte block at p + off, stored to dst + off as well when dst is set. */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"), always_inline))
static inline __m512i load_wide(const uint8_t *p, uint8_t *dst, size_t off)
{
    __m512i x = _mm512_loadu_si512((const void *)(p + off));
    if (dst)
        _mm512_storeu_si512((void *)(dst + off), x);
    return x;
}

/* Each 128-bit lane of x folded D bits forward (k: that D's constants in every lane),
 * plus the next block. */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"), always_inline))
static inline __m512i fold_wide(__m512i x, __m512i k, __m512i next)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                     0x96 /* a ^ b ^ c */);
}

/* fold_clmul with AVX-512 (n >= 256, a multiple of 16): four 512-bit registers, sixteen
 * 128-bit lanes, each folded 2048 bits forward per 256-byte step; then the four into
 * one, one 64-byte block a step; its four lanes into one, and fold_tail for the rest.
 * An 8 KiB payload's CRC takes about a third of fold_clmul's time. With `sum`, the
 * blocks' 32-bit words are also added to *sum (mrc_sum_part's sum) as they go by, the
 * first 64 bytes left out when `first` stands in for them; the last n % 64 bytes are
 * left to the caller. */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"), always_inline))
static inline uint32_t fold_vpclmul(uint32_t c, const uint8_t *p, uint8_t *dst, size_t n,
                                    const uint8_t *first, uint64_t *sum)
{
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01322d1430LL,
                                                                0x011542778aLL));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01c6e41596LL,
                                                               0x0154442bd4LL));
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);

    /* The sum: each 64-bit lane's low and high 32-bit words, in two accumulators. */
    const __m512i low32 = _mm512_set1_epi64(0xffffffffLL);
    __m512i s0 = _mm512_setzero_si512(), s1 = s0;
#define SUM_WIDE(x)                                                   \
    do {                                                              \
        if (sum) {                                                    \
            s0 = _mm512_add_epi64(s0, _mm512_and_si512((x), low32));  \
            s1 = _mm512_add_epi64(s1, _mm512_srli_epi64((x), 32));    \
        }                                                             \
    } while (0)

    __m512i x1 = load_wide(first ? first : p, dst, 0x00);
    __m512i x2 = load_wide(p, dst, 0x40);
    __m512i x3 = load_wide(p, dst, 0x80);
    __m512i x4 = load_wide(p, dst, 0xc0);
    if (!first)
        SUM_WIDE(x1);
    SUM_WIDE(x2);
    SUM_WIDE(x3);
    SUM_WIDE(x4);
    x1 = _mm512_xor_si512(x1, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    p += 256;
    dst = dst ? dst + 256 : dst;
    n -= 256;

    while (n >= 256) {
        __m512i y1 = load_wide(p, dst, 0x00), y2 = load_wide(p, dst, 0x40);
        __m512i y3 = load_wide(p, dst, 0x80), y4 = load_wide(p, dst, 0xc0);
        SUM_WIDE(y1);
        SUM_WIDE(y2);
        SUM_WIDE(y3);
        SUM_WIDE(y4);
        x1 = fold_wide(x1, k2048, y1);
        x2 = fold_wide(x2, k2048, y2);
        x3 = fold_wide(x3, k2048, y3);
        x4 = fold_wide(x4, k2048, y4);
        p += 256;
        dst = dst ? dst + 256 : dst;
        n -= 256;
    }
    x1 = fold_wide(x1, k512, x2);
    x1 = fold_wide(x1, k512, x3);
    x1 = fold_wide(x1, k512, x4);
    while (n >= 64) {
        __m512i y = load_wide(p, dst, 0);
        SUM_WIDE(y);
        x1 = fold_wide(x1, k512, y);
        p += 64;
        dst = dst ? dst + 64 : dst;
        n -= 64;
    }
#undef SUM_WIDE
    if (sum)
        *sum += (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(s0, s1));

    /* The lanes, first to last: each folded 128 bits forward onto the next. */
    __m128i y = _mm512_extracti32x4_epi32(x1, 0), t;
    t = _mm_clmulepi64_si128(y, k3k4, 0x00);
    y = _mm_clmulepi64_si128(y, k3k4, 0x11);
    y = _mm_xor_si128(_mm_xor_si128(y, t), _mm512_extracti32x4_epi32(x1, 1));
    t = _mm_clmulepi64_si128(y, k3k4, 0x00);
    y = _mm_clmulepi64_si128(y, k3k4, 0x11);
    y = _mm_xor_si128(_mm_xor_si128(y, t), _mm512_extracti32x4_epi32(x1, 2));
    t = _mm_clmulepi64_si128(y, k3k4, 0x00);
    y = _mm_clmulepi64_si128(y, k3k4, 0x11);
    y = _mm_xor_si128(_mm_xor_si128(y, t), _mm512_extracti32x4_epi32(x1, 3));
    return fold_tail(y, p, dst, n);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t raw_vpclmul(uint32_t c, const uint8_t *p, size_t n)
{
    return fold_vpclmul(c, p, NULL, n, NULL, NULL);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t raw_vpclmul_copy(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n)
{
    return fold_vpclmul(c, src, dst, n, NULL, NULL);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t raw_vpclmul_copy_sum(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n,
                                     uint64_t *sum)
{
    return fold_vpclmul(c, src, dst, n, NULL, sum);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t raw_vpclmul_first(uint32_t c, const uint8_t *first, const uint8_t *p,
                                  size_t n)
{
    return fold_vpclmul(c, p, NULL, n, first, NULL);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
static uint32_t raw_vpclmul_first_sum(uint32_t c, const uint8_t *first, const uint8_t *p,
                                      size_t n, uint64_t *sum)
{
    return fold_vpclmul(c, p, NULL, n, first, sum);
}

__attribute__((target("pclmul,sse4.1")))
static uint32_t raw_clmul(uint32_t c, const uint8_t *p, size_t n)
{
    return fold_clmul(c, p, NULL, n, NULL);
}

__attribute__((target("pclmul,sse4.1")))
static uint32_t raw_clmul_copy(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n)
{
    return fold_clmul(c, src, dst, n, NULL);
}

__attribute__((target("pclmul,sse4.1")))
static uint32_t raw_clmul_first(uint32_t c, const uint8_t *first, const uint8_t *p, size_t n)
{
    return fold_clmul(c, p, NULL, n, first);
}
#endif

__attribute__((constructor))
static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    mrc_crc32_impl(2);
}

int mrc_crc32_impl(int want)
{
    use_clmul = 0;
#ifdef HAVE_X86_CLMUL
    __builtin_cpu_init();
    if (want >= 1 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"))
        use_clmul = 1;
    if (want >= 2 && use_clmul && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("vpclmulqdq"))
        use_clmul = 2;
#else
    (void)want;
#endif
    return use_clmul;
}

uint32_t mrc_crc32_raw(uint32_t c, const uint8_t *p, size_t n)
{
#ifdef HAVE_X86_CLMUL
    if (use_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        c = use_clmul == 2 && bulk >= 256 ? raw_vpclmul(c, p, bulk) : raw_clmul(c, p, bulk);
        p += bulk;
        n -= bulk;
    }
#endif
    return raw_table(c, p, n);
}

uint32_t mrc_crc32_first_raw(uint32_t c, const uint8_t *first, const uint8_t *p, size_t n)
{
#ifdef HAVE_X86_CLMUL
    if (use_clmul) {
        size_t bulk = n & ~(size_t)15;
        c = use_clmul == 2 && bulk >= 256 ? raw_vpclmul_first(c, first, p, bulk)
                                          : raw_clmul_first(c, first, p, bulk);
        return raw_table(c, p + bulk, n - bulk);
    }
#endif
    c = raw_table(c, first, 64);
    return raw_table(c, p + 64, n - 64);
}

uint32_t mrc_crc32_copy_raw(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n)
{
#ifdef HAVE_X86_CLMUL
    if (use_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        c = use_clmul == 2 && bulk >= 256 ? raw_vpclmul_copy(c, dst, src, bulk)
                                          : raw_clmul_copy(c, dst, src, bulk);
        dst += bulk;
        src += bulk;
        n -= bulk;
    }
#endif
    memcpy(dst, src, n);
    return raw_table(c, dst, n);
}

uint32_t mrc_crc32_copy(uint32_t crc, uint8_t *dst, const uint8_t *src, size_t n)
{
    return ~mrc_crc32_copy_raw(~crc, dst, src, n);
}

uint32_t mrc_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~mrc_crc32_raw(~crc, p, n);
}

uint32_t mrc_crc32_copy_sum_raw(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n,
                                uint64_t *sum)
{
#ifdef HAVE_X86_CLMUL
    if (use_clmul == 2 && n >= 256) {
        size_t bulk = n & ~(size_t)63;
        c = raw_vpclmul_copy_sum(c, dst, src, bulk, sum);
        *sum += mrc_sum_part(src + bulk, n - bulk);
        return dst ? mrc_crc32_copy_raw(c, dst + bulk, src + bulk, n - bulk)
                   : mrc_crc32_raw(c, src + bulk, n - bulk);
    }
#endif
    c = dst ? mrc_crc32_copy_raw(c, dst, src, n) : mrc_crc32_raw(c, src, n);
    *sum += mrc_sum_part(src, n);
    return c;
}

uint32_t mrc_crc32_first_sum_raw(uint32_t c, const uint8_t *first, const uint8_t *p, size_t n,
                                 uint64_t *sum)
{
#ifdef HAVE_X86_CLMUL
    if (use_clmul == 2 && n >= 256) {
        size_t bulk = n & ~(size_t)63;
        c = raw_vpclmul_first_sum(c, first, p, bulk, sum);
        *sum += mrc_sum_part(p + bulk, n - bulk);
        return raw_table(c, p + bulk, n - bulk);
    }
#endif
    c = mrc_crc32_first_raw(c, first, p, n);
    *sum += mrc_sum_part(p + 64, n - 64);
    return c;
}
