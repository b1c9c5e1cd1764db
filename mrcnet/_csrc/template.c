/* Data frames from a template, control frames finished in place. See template.h for the
 * contract of each function. */
#include "template.h"

#include <string.h>

#include "checksum.h"
#include "icrc.h"
#include "parsed.h"

#define IP6_LEN 40
#define UDP_LEN 8
#define METH_LEN 4
#define TSETH_LEN 4
#define RETH_LEN 16
#define IMMDT_LEN 4
#define TS_FORMAT_TYPE 1
#define BTH_F_RTX 0x20  /* BTH byte 8 (mrcnet.constants.BTH_F_RTX) */

static inline void put16(uint8_t *p, uint32_t v) { p[0] = v >> 8; p[1] = v; }
static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

/* The DSCP bits of an IPv6 header's traffic class (version, ECN and flow label stay). */
static inline void set_dscp(uint8_t *ip, uint32_t dscp)
{
    ip[0] = (uint8_t)(0x60 | (dscp >> 2));
    ip[1] = (uint8_t)(((dscp & 3) << 6) | (ip[1] & 0x3f));
}

/* mrc_patch_data's frame. With `gather`, a payload of MRC_GATHER_MIN bytes or more that
 * starts and ends at even offsets of the datagram (every such frame but an odd-length
 * last) is not copied: out gets the headers and then the ICRC, and the payload goes to
 * the socket from where it lies (*gathered set; the frame's bytes in out are then its
 * length less payload_len). Returns the frame's length, 0 if it does not fit. */
static size_t patch(uint8_t *out, size_t cap, const struct mrc_tmpl *t,
                    uint32_t opcode, uint32_t bth_flags, uint32_t psn, uint32_t ev,
                    const uint8_t *outer_da, const uint8_t *srh_segs,
                    const uint8_t *pseudo_dst, uint64_t va,
                    uint32_t ext, uint32_t meth, uint32_t imm, uint32_t timestamp,
                    const uint8_t *payload, size_t payload_len, int gather, int *gathered)
{
    size_t ext_len = METH_LEN + RETH_LEN + ((ext & MRC_EXT_IMM) ? IMMDT_LEN : 0) +
                     ((ext & MRC_EXT_TSETH) ? TSETH_LEN : 0);
    size_t total = t->hdr_len + ext_len + payload_len + 4;
    /* The UDP checksum's share of the payload comes from the CRC's pass when the payload
     * starts and ends at even offsets of the datagram; a gathered payload needs it. */
    size_t head = t->hdr_len + ext_len - t->off_udp;
    int split = !(head & 1) && !(payload_len & 1);
    gather = gather && split && payload_len >= MRC_GATHER_MIN;
    *gathered = gather;
    if (total - (gather ? payload_len : 0) > cap || total - t->off_outer_ip - IP6_LEN > 0xffff)
        return 0;

    memcpy(out, t->hdr, t->hdr_len);

    /* Outer IPv6: half of the EV in the low 16 bits of the flow label (the top 4 stay the
     * template's), payload length, and the destination (uSID container) for this path. */
    uint8_t *o = out + t->off_outer_ip;
    uint32_t fl = mrc_ev_flow(ev);
    put16(o + 2, fl);
    put16(o + 4, (uint32_t)(total - t->off_outer_ip - IP6_LEN));
    if (outer_da)
        memcpy(o + 24, outer_da, 16);
    if (srh_segs && t->off_srh_segs)
        memcpy(out + t->off_srh_segs, srh_segs, t->srh_segs_len);

    /* A retransmission is marked TRIMMABLE_RETX (the template holds TRIMMABLE). */
    if (bth_flags & BTH_F_RTX) {
        set_dscp(o, (uint32_t)mrc_dscp_retx);
        if (t->off_inner_ip)
            set_dscp(out + t->off_inner_ip, (uint32_t)mrc_dscp_retx);
    }
    if (t->off_inner_ip) {
        put16(out + t->off_inner_ip + 2, fl);
        put16(out + t->off_inner_ip + 4, (uint32_t)(total - t->off_inner_ip - IP6_LEN));
    }

    uint8_t *u = out + t->off_udp;
    put16(u + 0, mrc_ev_sport(ev));
    put16(u + 4, (uint32_t)(total - t->off_udp));

    uint8_t *b = out + t->off_bth;
    b[0] = (uint8_t)opcode;                         /* byte 1 (SE/M/Pad/TVer) stays */
    b[8] = (uint8_t)bth_flags;
    b[9] = psn >> 16; b[10] = psn >> 8; b[11] = psn;

    /* Extension headers in the order the reference builder writes them:
     * METH, [TSETH], RETH, [ImmDt]. */
    uint8_t *e = out + t->hdr_len;
    put32(e, meth);                                 /* RQMSN(16) | MSN(16) */
    e += METH_LEN;
    if (ext & MRC_EXT_TSETH) {
        put16(e, timestamp);                        /* timestamp | TSR 0, format type */
        put16(e + 2, TS_FORMAT_TYPE);
        e += TSETH_LEN;
    }
    put32(e, (uint32_t)(va >> 32));
    put32(e + 4, (uint32_t)va);
    put32(e + 8, t->rkey);
    put32(e + 12, (uint32_t)payload_len);
    e += RETH_LEN;
    if (ext & MRC_EXT_IMM) {
        put32(e, imm);
        e += IMMDT_LEN;
    }
    /* ICRC first: it masks the UDP checksum, and the checksum then covers the ICRC. The
     * payload is copied in by the CRC's own pass over it (the copy was a pass of its own,
     * ~a third of the build's time on 8 KiB frames); when it starts and ends at even
     * offsets of the datagram (every frame but an odd-length last one), that pass also
     * sums it for the UDP checksum, which then adds only the headers and the ICRC (the
     * payload's own pass was 5-10 % of the sending mrcd's user time on 8 KiB frames).
     * Gathered, the pass only reads the payload, and the ICRC follows the headers. */
    uint8_t *ic = e + (gather ? 0 : payload_len);
    uint8_t *cov = out + (t->off_inner_ip ? t->off_inner_ip : t->off_udp);
    uint64_t part = 0;
    uint32_t crc = mrc_icrc_in_place_copy_sum(cov, (size_t)(e - cov), payload, payload_len,
                                              t->off_inner_ip != 0, split ? &part : NULL,
                                              !gather);
    if (t->icrc_le) { ic[0] = crc; ic[1] = crc >> 8; ic[2] = crc >> 16; ic[3] = crc >> 24; }
    else put32(ic, crc);

    put16(u + 6, 0);
    uint32_t ph = pseudo_dst ? mrc_tmpl_addr_sum(t->pseudo_src, pseudo_dst) : t->pseudo_sum;
    uint16_t c;
    if (split) {
        part += mrc_sum_part(u, head) + mrc_sum_part(ic, 4);
        c = (uint16_t)~mrc_udp6_sum_part(ph, part, total - t->off_udp);
    } else {
        c = (uint16_t)~mrc_udp6_sum_addrs(ph, u, total - t->off_udp);
    }
    put16(u + 6, c ? c : 0xffff);
    return total;
}

size_t mrc_patch_data(uint8_t *out, size_t cap, const struct mrc_tmpl *t,
                      uint32_t opcode, uint32_t bth_flags, uint32_t psn, uint32_t ev,
                      const uint8_t *outer_da, const uint8_t *srh_segs,
                      const uint8_t *pseudo_dst, uint64_t va,
                      uint32_t ext, uint32_t meth, uint32_t imm, uint32_t timestamp,
                      const uint8_t *payload, size_t payload_len)
{
    int gathered;
    return patch(out, cap, t, opcode, bth_flags, psn, ev, outer_da, srh_segs, pseudo_dst, va,
                 ext, meth, imm, timestamp, payload, payload_len, 0, &gathered);
}

size_t mrc_patch_run(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                     const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                     const uint8_t *flags, const uint8_t *ext, uint32_t psn0, uint64_t va0,
                     const uint8_t *payload, size_t payload_len, size_t seg,
                     uint32_t meth, uint32_t imm, uint32_t timestamp, uint32_t *lens)
{
    return mrc_patch_run_gather(out, cap, n, paths, slot, ev, op, flags, ext, psn0, va0,
                                payload, payload_len, seg, meth, imm, timestamp, lens, NULL);
}

size_t mrc_patch_run_gather(uint8_t *out, size_t cap, unsigned n,
                            const struct mrc_path *paths, const uint16_t *slot,
                            const uint32_t *ev, const uint8_t *op, const uint8_t *flags,
                            const uint8_t *ext, uint32_t psn0, uint64_t va0,
                            const uint8_t *payload, size_t payload_len, size_t seg,
                            uint32_t meth, uint32_t imm, uint32_t timestamp, uint32_t *lens,
                            uint32_t *plens)
{
    size_t used = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t off = (size_t)i * seg;
        if (off > payload_len)
            return 0;
        size_t len = payload_len - off < seg ? payload_len - off : seg;
        const struct mrc_path *p = &paths[slot[i]];
        int gathered;
        size_t k = patch(out + used, cap - used, p->tmpl, op[i], flags[i],
                         (psn0 + i) & 0xffffffu, ev[i], p->outer_da, p->srh_segs,
                         p->pseudo_dst, va0 + off, ext[i], meth, imm, timestamp,
                         payload + off, len, plens != NULL, &gathered);
        if (!k)
            return 0;
        if (gathered)
            k -= len;
        if (plens)
            plens[i] = gathered ? (uint32_t)len : 0;
        lens[i] = (uint32_t)k;
        used += k;
    }
    return used;
}

size_t mrc_patch_msgs(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                      const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                      const uint8_t *flags, const uint8_t *ext, uint32_t psn0,
                      const uint64_t *va, const uint32_t *meth, const uint32_t *imm,
                      const uint8_t *payload, const uint32_t *plen, uint32_t timestamp,
                      uint32_t *lens)
{
    size_t used = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct mrc_path *p = &paths[slot[i]];
        size_t k = mrc_patch_data(out + used, cap - used, p->tmpl, op[i], flags[i],
                                  (psn0 + i) & 0xffffffu, ev[i], p->outer_da, p->srh_segs,
                                  p->pseudo_dst, va[i], ext[i], meth[i], imm[i], timestamp,
                                  payload, plen[i]);
        if (!k)
            return 0;
        payload += plen[i];
        lens[i] = (uint32_t)k;
        used += k;
    }
    return used;
}

void mrc_finish_frame(uint8_t *frame, size_t len, uint32_t icrc_from, int has_ip,
                      uint32_t udp_off, uint32_t pseudo_sum)
{
    uint8_t *ic = frame + len - 4;
    uint32_t crc = mrc_icrc_in_place(frame + icrc_from, (size_t)(ic - frame) - icrc_from, has_ip);
    ic[0] = crc; ic[1] = crc >> 8; ic[2] = crc >> 16; ic[3] = crc >> 24;  /* little-endian */
    uint8_t *u = frame + udp_off;
    put16(u + 6, 0);
    uint16_t c = (uint16_t)~mrc_udp6_sum_addrs(pseudo_sum, u, len - udp_off);
    put16(u + 6, c ? c : 0xffff);
}
