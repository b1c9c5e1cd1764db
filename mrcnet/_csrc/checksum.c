/* The Internet checksum of UDP over IPv6. See checksum.h for the contract of each function. */
#include "checksum.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86_AVX2 1
#endif

static int use_avx2;

int mrc_sum_impl(int want)
{
#ifdef HAVE_X86_AVX2
    __builtin_cpu_init();
    use_avx2 = want && __builtin_cpu_supports("avx2");
#else
    (void)want;
    use_avx2 = 0;
#endif
    return use_avx2;
}

__attribute__((constructor))
static void sum_init(void)
{
    mrc_sum_impl(1);
}

#ifdef HAVE_X86_AVX2
/* The 32-bit words of n bytes (n a multiple of 64) summed into 64 bits: each 256-bit
 * load's words are zero-extended to 64-bit lanes (unpack with zero) and added to four
 * accumulators. -O2 does not vectorize the scalar loop below, which ran at about 6
 * GB/s: the UDP checksum was a third of the C cost of an 8 KiB frame (built and
 * verified once each). */
__attribute__((target("avx2")))
static uint64_t sum_avx2(const uint8_t *p, size_t n)
{
    const __m256i z = _mm256_setzero_si256();
    __m256i a0 = z, a1 = z, a2 = z, a3 = z;
    for (size_t i = 0; i < n; i += 64) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + i + 32));
        a0 = _mm256_add_epi64(a0, _mm256_unpacklo_epi32(v0, z));
        a1 = _mm256_add_epi64(a1, _mm256_unpackhi_epi32(v0, z));
        a2 = _mm256_add_epi64(a2, _mm256_unpacklo_epi32(v1, z));
        a3 = _mm256_add_epi64(a3, _mm256_unpackhi_epi32(v1, z));
    }
    __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a);
    return l[0] + l[1] + l[2] + l[3];
}
#endif

/* One's-complement sum of n bytes in *native* byte order, unfolded. RFC 1071 sec. 2: the
 * sum is byte-order independent and carries can be deferred, so we add 32-bit words into
 * independent 64-bit accumulators (no carry chain; AVX2 lanes when the CPU has them) and
 * fold once at the end (sum_native). A frame would need 2^32 words to overflow. */
uint64_t mrc_sum_part(const uint8_t *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#ifdef HAVE_X86_AVX2
    if (use_avx2 && n >= 128) {
        size_t bulk = n & ~(size_t)63;
        s0 = sum_avx2(p, bulk);
        p += bulk;
        n -= bulk;
    }
#endif
    while (n >= 32) {
        uint32_t w[8];
        memcpy(w, p, 32);          /* unaligned-safe; compiles to plain loads */
        s0 += (uint64_t)w[0] + w[4];
        s1 += (uint64_t)w[1] + w[5];
        s2 += (uint64_t)w[2] + w[6];
        s3 += (uint64_t)w[3] + w[7];
        p += 32;
        n -= 32;
    }
    uint64_t s = s0 + s1 + s2 + s3;
    while (n >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        s += w;
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        uint16_t h;
        memcpy(&h, p, 2);
        s += h;
        p += 2;
        n -= 2;
    }
    if (n) {
        uint16_t h = 0;
        memcpy(&h, p, 1);          /* zero padding = RFC 768 padding of an odd tail */
        s += h;
    }
    return s;
}

/* A 64-bit native-order sum folded to 16 bits. */
static uint32_t fold_part(uint64_t s)
{
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    return (uint32_t)s;
}

/* One's-complement sum of n bytes in native byte order, folded to 16 bits. */
static uint32_t sum_native(const uint8_t *p, size_t n)
{
    return fold_part(mrc_sum_part(p, n));
}

/* Native-order folded sum -> the same sum as big-endian 16-bit words. */
static uint32_t to_be16sum(uint32_t s)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return ((s & 0xff) << 8) | (s >> 8);
#else
    return s;
#endif
}

static uint32_t fold(uint64_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint32_t)s;
}

/* Sum of the pseudo-header addresses; constant per template, so it is cached there. */
static uint32_t addr_sum(const uint8_t *src, const uint8_t *dst)
{
    return fold((uint64_t)sum_native(src, 16) + sum_native(dst, 16));
}

uint32_t mrc_tmpl_addr_sum(const uint8_t *src, const uint8_t *dst)
{
    return addr_sum(src, dst);
}

uint16_t mrc_udp6_sum_addrs(uint32_t addrs, const uint8_t *udp, size_t udp_len)
{
    return mrc_udp6_sum_part(addrs, mrc_sum_part(udp, udp_len), udp_len);
}

uint16_t mrc_udp6_sum_part(uint32_t addrs, uint64_t part, size_t udp_len)
{
    uint64_t s = to_be16sum(fold((uint64_t)addrs + fold_part(part)));
    s += (udp_len >> 16) + (udp_len & 0xffff) + 17u;  /* upper-layer length, next header */
    return (uint16_t)fold(s);
}

uint16_t mrc_udp6_sum(const uint8_t *src, const uint8_t *dst,
                      const uint8_t *udp, size_t udp_len)
{
    return mrc_udp6_sum_addrs(addr_sum(src, dst), udp, udp_len);
}

uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                           const uint8_t *udp, size_t udp_len)
{
    uint16_t c = (uint16_t)~mrc_udp6_sum(src, dst, udp, udp_len);
    return c ? c : 0xffff;
}
