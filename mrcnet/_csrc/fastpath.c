/* mrcnet C fast path. See fastpath.h for the contract of each function. */
#include "fastpath.h"

#include <errno.h>
#include <string.h>

/* ---- checksums -------------------------------------------------------------------- */

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

/* One's-complement sum of n bytes in *native* byte order, folded to 16 bits. RFC 1071
 * sec. 2: the sum is byte-order independent and carries can be deferred, so we add 32-bit
 * words into independent 64-bit accumulators (no carry chain; AVX2 lanes when the CPU
 * has them) and fold once at the end. A frame would need 2^32 words to overflow. */
static uint32_t sum_native(const uint8_t *p, size_t n)
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
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    return (uint32_t)s;
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

static uint16_t udp6_sum(uint32_t addrs, const uint8_t *udp, size_t udp_len)
{
    uint64_t s = to_be16sum(fold((uint64_t)addrs + sum_native(udp, udp_len)));
    s += (udp_len >> 16) + (udp_len & 0xffff) + 17u;  /* upper-layer length, next header */
    return (uint16_t)fold(s);
}

uint16_t mrc_udp6_sum(const uint8_t *src, const uint8_t *dst,
                      const uint8_t *udp, size_t udp_len)
{
    return udp6_sum(addr_sum(src, dst), udp, udp_len);
}

uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                           const uint8_t *udp, size_t udp_len)
{
    uint16_t c = (uint16_t)~mrc_udp6_sum(src, dst, udp, udp_len);
    return c ? c : 0xffff;
}

#define IP6_LEN 40
#define UDP_LEN 8
#define BTH_LEN 12

/* Raw CRC state after RoCEv2's 8 bytes of 0xff (they stand for the InfiniBand LRH). */
static uint32_t icrc_prefix(void)
{
    static const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    return mrc_crc32_raw(0xffffffffu, ones, sizeof ones);
}

uint32_t mrc_icrc(const uint8_t *p, size_t len, int has_ip)
{
    uint8_t head[IP6_LEN + UDP_LEN + BTH_LEN];
    size_t ip = has_ip ? IP6_LEN : 0, hlen = ip + UDP_LEN + BTH_LEN;

    if (len < hlen)
        return 0;
    /* The input is read-only: copy the bytes that hold variant fields and mask them. */
    memcpy(head, p, hlen);
    if (has_ip) {
        head[0] |= 0x0f;                      /* traffic class (low nibble of byte 0) */
        head[1] = head[2] = head[3] = 0xff;   /* traffic class (rest) + flow label */
        head[7] = 0xff;                       /* hop limit */
    }
    head[ip + 6] = head[ip + 7] = 0xff;       /* UDP checksum */
    head[ip + UDP_LEN + 4] = 0xff;            /* BTH reserved byte */
    uint32_t c = mrc_crc32_raw(icrc_prefix(), head, hlen);
    return ~mrc_crc32_raw(c, p + hlen, len - hlen);
}

/* ICRC of a frame we are writing: mask the variant fields in place so one CRC pass covers
 * the whole span (the fast path needs >= 64 contiguous bytes), then put them back. The
 * UDP checksum is left masked: the caller overwrites it next. */
static uint32_t icrc_in_place(uint8_t *p, size_t len, int has_ip)
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
    uint32_t crc = ~mrc_crc32_raw(icrc_prefix(), p, len);
    p[ip + UDP_LEN + 4] = bth_resv;
    memcpy(p, saved, 4);
    p[7] = saved[4];
    return crc;
}

/* ---- data frame template ---------------------------------------------------------- */

static inline void put16(uint8_t *p, uint32_t v) { p[0] = v >> 8; p[1] = v; }
static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

size_t mrc_patch_data(uint8_t *out, size_t cap, const struct mrc_tmpl *t,
                      uint32_t opcode, uint32_t bth_flags, uint32_t psn, uint32_t ev,
                      const uint8_t *outer_da, const uint8_t *srh_segs,
                      const uint8_t *pseudo_dst, uint64_t va,
                      uint32_t ext, uint32_t msn, uint32_t imm, uint32_t timestamp,
                      const uint8_t *payload, size_t payload_len)
{
    size_t ext_len = ((ext & MRC_EXT_IMM) ? 8 : 0) + ((ext & MRC_EXT_TSETH) ? 4 : 0);
    size_t total = t->hdr_len + ext_len + payload_len + 4;
    if (total > cap || total - t->off_outer_ip - IP6_LEN > 0xffff)
        return 0;

    memcpy(out, t->hdr, t->hdr_len);

    /* Outer IPv6: EV in the low 16 bits of the flow label (the top 4 stay the template's),
     * payload length, and the destination (uSID container) for this path. */
    uint8_t *o = out + t->off_outer_ip;
    put16(o + 2, ev & 0xffff);
    put16(o + 4, (uint32_t)(total - t->off_outer_ip - IP6_LEN));
    if (outer_da)
        memcpy(o + 24, outer_da, 16);
    if (srh_segs && t->off_srh_segs)
        memcpy(out + t->off_srh_segs, srh_segs, t->srh_segs_len);

    if (t->off_inner_ip)
        put16(out + t->off_inner_ip + 4, (uint32_t)(total - t->off_inner_ip - IP6_LEN));

    uint8_t *u = out + t->off_udp;
    put16(u + 0, ev >> 16);
    put16(u + 4, (uint32_t)(total - t->off_udp));

    uint8_t *b = out + t->off_bth;
    b[0] = (uint8_t)opcode;                         /* byte 1 (SE/M/Pad/TVer) stays */
    b[8] = (uint8_t)bth_flags;
    b[9] = psn >> 16; b[10] = psn >> 8; b[11] = psn;

    uint8_t *r = out + t->off_reth;
    put32(r, (uint32_t)(va >> 32));
    put32(r + 4, (uint32_t)va);
    put32(r + 12, (uint32_t)payload_len);

    /* Extension headers in the order the reference builder writes them. */
    uint8_t *e = out + t->hdr_len;
    uint8_t *e_imm = e, *e_ts = e;
    if ((ext & MRC_EXT_IMM) && (ext & MRC_EXT_TSETH)) {
        if (t->imm_first) e_ts = e + 8; else e_imm = e + 4;
    }
    if (ext & MRC_EXT_IMM) {
        put32(e_imm, msn & 0xffffff);               /* reserved(8) | MSN(24) */
        put32(e_imm + 4, imm);
    }
    if (ext & MRC_EXT_TSETH) {
        put16(e_ts, timestamp);                     /* timestamp(16) | reserved(16) */
        put16(e_ts + 2, 0);
    }
    if (payload_len)
        memcpy(e + ext_len, payload, payload_len);

    /* ICRC first: it masks the UDP checksum, and the checksum then covers the ICRC. */
    uint8_t *ic = out + total - 4;
    uint8_t *cov = out + (t->off_inner_ip ? t->off_inner_ip : t->off_udp);
    uint32_t crc = icrc_in_place(cov, (size_t)(ic - cov), t->off_inner_ip != 0);
    if (t->icrc_le) { ic[0] = crc; ic[1] = crc >> 8; ic[2] = crc >> 16; ic[3] = crc >> 24; }
    else put32(ic, crc);

    put16(u + 6, 0);
    uint32_t ph = pseudo_dst ? addr_sum(t->pseudo_src, pseudo_dst) : t->pseudo_sum;
    uint16_t c = (uint16_t)~udp6_sum(ph, u, total - t->off_udp);
    put16(u + 6, c ? c : 0xffff);
    return total;
}

size_t mrc_patch_run(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                     const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                     const uint8_t *flags, const uint8_t *ext, uint32_t psn0, uint64_t va0,
                     const uint8_t *payload, size_t payload_len, size_t seg,
                     uint32_t msn, uint32_t imm, uint32_t timestamp, uint32_t *lens)
{
    size_t used = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t off = (size_t)i * seg;
        if (off > payload_len)
            return 0;
        size_t len = payload_len - off < seg ? payload_len - off : seg;
        const struct mrc_path *p = &paths[slot[i]];
        size_t k = mrc_patch_data(out + used, cap - used, p->tmpl, op[i], flags[i],
                                  (psn0 + i) & 0xffffffu, ev[i], p->outer_da, p->srh_segs,
                                  p->pseudo_dst, va0 + off, ext[i], msn, imm, timestamp,
                                  payload + off, len);
        if (!k)
            return 0;
        lens[i] = (uint32_t)k;
        used += k;
    }
    return used;
}

void mrc_finish_frame(uint8_t *frame, size_t len, uint32_t icrc_from, int has_ip,
                      uint32_t udp_off, uint32_t pseudo_sum)
{
    uint8_t *ic = frame + len - 4;
    uint32_t crc = icrc_in_place(frame + icrc_from, (size_t)(ic - frame) - icrc_from, has_ip);
    ic[0] = crc; ic[1] = crc >> 8; ic[2] = crc >> 16; ic[3] = crc >> 24;  /* little-endian */
    uint8_t *u = frame + udp_off;
    put16(u + 6, 0);
    uint16_t c = (uint16_t)~udp6_sum(pseudo_sum, u, len - udp_off);
    put16(u + 6, c ? c : 0xffff);
}

/* ---- batched packet socket I/O ---------------------------------------------------- */

void mrc_batch_init(struct mrc_batch *b)
{
    memset(b->msgs, 0, sizeof(*b->msgs) * b->max);
    for (unsigned i = 0; i < b->max; i++) {
        b->msgs[i].msg_hdr.msg_iov = &b->iov[i];
        b->msgs[i].msg_hdr.msg_iovlen = 1;
    }
}

int mrc_send_prepared(int fd, struct mrc_batch *b, unsigned n)
{
    unsigned done = 0;
    while (done < n) {
        int r = sendmmsg(fd, b->msgs + done, n - done, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                return (int)done;  /* queue full: the caller retries the rest later */
            return done ? (int)done : -errno;
        }
        if (r == 0)
            break;
        done += (unsigned)r;
    }
    return (int)done;
}

int mrc_send_batch(int fd, struct mrc_batch *b, const uint8_t *data, unsigned n)
{
    size_t off = 0;
    if (n > b->max)
        n = b->max;
    for (unsigned i = 0; i < n; i++) {
        b->iov[i].iov_base = (void *)(data + off);
        b->iov[i].iov_len = b->lens[i];
        b->msgs[i].msg_hdr.msg_name = NULL;  /* the socket is bound to its port */
        b->msgs[i].msg_hdr.msg_namelen = 0;
        off += b->lens[i];
    }
    return mrc_send_prepared(fd, b, n);
}

int mrc_send_slots(int fd, struct mrc_batch *b, unsigned n)
{
    if (n > b->max)
        n = b->max;
    for (unsigned i = 0; i < n; i++) {
        b->iov[i].iov_base = b->bufs + (size_t)i * b->bufsize;
        b->iov[i].iov_len = b->lens[i];
        b->msgs[i].msg_hdr.msg_name = NULL;
        b->msgs[i].msg_hdr.msg_namelen = 0;
    }
    return mrc_send_prepared(fd, b, n);
}

int mrc_recv_batch(int fd, struct mrc_batch *b, unsigned n, int wait, int skip_outgoing,
                   unsigned *nrecv)
{
    if (n > b->max)
        n = b->max;
    for (unsigned i = 0; i < n; i++) {
        /* recvmmsg overwrites these; reset so every slot gets the full buffer again. */
        b->iov[i].iov_base = b->bufs + (size_t)i * b->bufsize;
        b->iov[i].iov_len = b->bufsize;
        b->msgs[i].msg_hdr.msg_name = &b->addrs[i];
        b->msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_ll);
        b->msgs[i].msg_hdr.msg_flags = 0;
    }
    int r;
    do {
        /* With `wait`, block for the first frame only, then take what is queued. */
        r = recvmmsg(fd, b->msgs, n, wait ? MSG_WAITFORONE : MSG_DONTWAIT, NULL);
    } while (r < 0 && errno == EINTR);
    *nrecv = 0;
    if (r < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    *nrecv = (unsigned)r;
    unsigned k = 0;
    for (unsigned i = 0; i < (unsigned)r; i++) {
        uint8_t pt = b->addrs[i].sll_pkttype;
        b->lens[i] = b->msgs[i].msg_len;
        b->pkttype[i] = pt;
        b->ifindex[i] = b->addrs[i].sll_ifindex;
        if (skip_outgoing && pt == PACKET_OUTGOING)
            continue;
        b->idx[k++] = i;
    }
    return (int)k;
}
