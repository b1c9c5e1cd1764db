#include "fastpath.h"

static uint32_t sum16(const uint8_t *p, size_t n, uint32_t acc)
{
    uint64_t s = acc;
    while (n >= 2) { s += (uint32_t)((p[0] << 8) | p[1]); p += 2; n -= 2; }
    if (n) s += (uint32_t)(p[0] << 8);
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return (uint32_t)s;
}

uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                           const uint8_t *udp, size_t udp_len)
{
    uint32_t s = sum16(src, 16, 0);
    s = sum16(dst, 16, s);
    s += (uint32_t)(udp_len >> 16) + (uint32_t)(udp_len & 0xffff) + 17u;
    s = sum16(udp, udp_len, s);
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    uint16_t c = (uint16_t)~s;
    return c ? c : 0xffff;
}
