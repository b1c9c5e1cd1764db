/* The RoCEv2 invariant CRC. See icrc.h for the contract of each function. */
#include "icrc.h"

#include <string.h>

#define IP6_LEN 40
#define UDP_LEN 8
#define BTH_LEN 12

/* Raw CRC state after RoCEv2's 8 bytes of 0xff (they stand for the InfiniBand LRH):
 * ~zlib.crc32(b"\xff" * 8), a constant (every ICRC started by computing it). */
#define ICRC_PREFIX 0xdebb20e3u

/* mrc_icrc, with *sum (not NULL, len >= 64) taking p[64:len]'s part of the UDP checksum. */
static uint32_t icrc(const uint8_t *p, size_t len, int has_ip, uint64_t *sum)
{
    /* The headers with variant fields, and when the frame has them the bytes after, up to
     * the 64 the CRC's fold takes in one step: the headers alone (60 or 20 bytes) went
     * through the table CRC, 8 bytes a step (in `perf record` of the receiving mrcd in a
     * goodput transfer, the table CRC was 1.3-2.0 % of its samples, 0.3 % after) */
    uint8_t head[64];
    size_t ip = has_ip ? IP6_LEN : 0, hlen = ip + UDP_LEN + BTH_LEN;

    if (len < hlen)
        return 0;
    /* The input is read-only: copy the bytes that hold variant fields and mask them. */
    size_t take = len < sizeof head ? hlen : sizeof head;
    memcpy(head, p, take);
    if (has_ip) {
        head[0] |= 0x0f;                      /* traffic class (low nibble of byte 0) */
        head[1] = head[2] = head[3] = 0xff;   /* traffic class (rest) + flow label */
        head[7] = 0xff;                       /* hop limit */
    }
    head[ip + 6] = head[ip + 7] = 0xff;       /* UDP checksum */
    head[ip + UDP_LEN + 4] = 0xff;            /* BTH reserved byte */
    if (take == sizeof head)
        return ~(sum ? mrc_crc32_first_sum_raw(ICRC_PREFIX, head, p, len, sum)
                     : mrc_crc32_first_raw(ICRC_PREFIX, head, p, len));
    uint32_t c = mrc_crc32_raw(ICRC_PREFIX, head, hlen);
    return ~mrc_crc32_raw(c, p + hlen, len - hlen);
}

uint32_t mrc_icrc(const uint8_t *p, size_t len, int has_ip)
{
    return icrc(p, len, has_ip, NULL);
}

uint32_t mrc_icrc_sum(const uint8_t *p, size_t len, int has_ip, uint64_t *sum)
{
    return len >= 64 ? icrc(p, len, has_ip, sum) : 0;
}

/* ICRC of a frame we are writing: mask the variant fields in place so one CRC pass covers
 * the whole span (the fast path needs >= 64 contiguous bytes), then put them back. The
 * UDP checksum is left masked: the caller overwrites it next. */
uint32_t mrc_icrc_in_place(uint8_t *p, size_t len, int has_ip)
{
    return mrc_icrc_in_place_copy(p, len, NULL, 0, has_ip);
}

uint32_t mrc_icrc_in_place_copy(uint8_t *p, size_t len, const uint8_t *src, size_t n,
                                int has_ip)
{
    return mrc_icrc_in_place_copy_sum(p, len, src, n, has_ip, NULL, 1);
}

uint32_t mrc_icrc_in_place_copy_sum(uint8_t *p, size_t len, const uint8_t *src, size_t n,
                                    int has_ip, uint64_t *sum, int copy)
{
    size_t ip = has_ip ? IP6_LEN : 0;
    uint8_t saved[5];
    memcpy(saved, p, 4);
    saved[4] = p[7];
    uint8_t bth_resv = p[ip + UDP_LEN + 4];
    if (has_ip) {
        p[0] |= 0x0f;
        p[1] = p[2] = p[3] = p[7] = 0xff;
    }
    p[ip + 6] = p[ip + 7] = 0xff;
    p[ip + UDP_LEN + 4] = 0xff;
    uint32_t c = mrc_crc32_raw(ICRC_PREFIX, p, len);
    if (n && sum)
        c = mrc_crc32_copy_sum_raw(c, copy ? p + len : NULL, src, n, sum);
    else if (n)
        c = copy ? mrc_crc32_copy_raw(c, p + len, src, n) : mrc_crc32_raw(c, src, n);
    uint32_t crc = ~c;
    p[ip + UDP_LEN + 4] = bth_resv;
    memcpy(p, saved, 4);
    p[7] = saved[4];
    return crc;
}
