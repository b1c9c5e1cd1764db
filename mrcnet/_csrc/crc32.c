/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the ICRC's CRC, equal to zlib's
 * crc32(). zlib spends about 1.3 cycles per byte here, which made the ICRC 90% of the cost
 * of a 9000-byte frame; carry-less multiplication (PCLMULQDQ) folds 64 bytes per step at
 * about 0.1 cycle per byte. Algorithm and constants: Gopal et al., "Fast CRC Computation
 * for Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009), as in Linux
 * (arch/x86/crypto/crc32-pclmul_asm.S) and Chromium's zlib (crc32_simd.c). A slicing-by-8
 * table does short inputs, tails, and CPUs without PCLMULQDQ. */
#include "icrc.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86_CLMUL 1
#endif

static uint32_t table[8][256];
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

/* Folds n bytes (n >= 64, a multiple of 16) into the raw state c, copying them to dst on
 * the way when dst is not NULL, and reading the first 64 from `first` instead of p when
 * that is not NULL (inlined into the callers below, so each has no test per block). */
__attribute__((target("pclmul,sse4.1"), always_inline))
static inline uint32_t fold_clmul(uint32_t c, const uint8_t *p, uint8_t *dst, size_t n,
                                  const uint8_t *first)
{
    /* x^(4*128+64) mod P, x^(4*128) mod P (bit-reflected) ... from the paper's appendix. */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
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

    /* Fold the four lanes into one, then any remaining 16-byte blocks. */
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
    while (n >= 16) {
        x2 = load_block(p, dst, 0);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16;
        dst = dst ? dst + 16 : dst;
        n -= 16;
    }

    /* 128 -> 64 bits, then 64 -> 32 with a Barrett reduction. */
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
    mrc_crc32_impl(1);
}

int mrc_crc32_impl(int want)
{
#ifdef HAVE_X86_CLMUL
    __builtin_cpu_init();
    use_clmul = want && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#else
    (void)want;
    use_clmul = 0;
#endif
    return use_clmul;
}

uint32_t mrc_crc32_raw(uint32_t c, const uint8_t *p, size_t n)
{
#ifdef HAVE_X86_CLMUL
    if (use_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        c = raw_clmul(c, p, bulk);
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
        c = raw_clmul_first(c, first, p, bulk);
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
        c = raw_clmul_copy(c, dst, src, bulk);
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
