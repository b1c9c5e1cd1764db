/* mrc_parse: the receive path's frame parser, a C twin of mrcnet.wire.parse_frame.
 *
 * parse_frame (mrcnet/wire/frame.py and the header modules it calls) is the reference;
 * this file repeats its checks one for one and in the same order, so that the first
 * failing check, hence the reason, is the same for every input. The comments name the
 * Python function each block mirrors. tests/wire/test_parse_differential.py compares the
 * two on 100,000+ random, mutated and hand-made frames: decision, reason and every field.
 *
 * Protocol values are spelled out here (a C file cannot import mrcnet.constants); a test
 * checks each against the Python constant of the same meaning. */
#include "parsed.h"

#include "checksum.h"
#include "icrc.h"

#include <string.h>

#define ETH_LEN 14
#define ETH_P_IPV6 0x86dd
#define ETH_MIN_FRAME 60          /* shorter frames are Ethernet-padded (frame.py) */
#define IP6_LEN 40
#define NH_ROUTING 43
#define NH_IPV6 41
#define NH_UDP 17
#define SRH_FIXED 8
#define SRH_TYPE 4
#define UDP_LEN 8
#define UDP_PORT 4791
#define BTH_LEN 12
#define ICRC_LEN 4
#define DSCP_TRIMMABLE_RETX 28
#define DSCP_TRIMMED 40
#define DSCP_TRIMMED_LASTHOP 32
#define ECN_CE 3
#define ENDPOINT_QPN 0x2u
#define METH_LEN 4
#define TSETH_LEN 4
#define RETH_LEN 16
#define IMMDT_LEN 4
#define AETH_LEN 4
#define SETH_LEN 28
#define CC_LEN 8
#define NETH_LEN 20
#define PETH_LEN 16
#define ERTH_LEN 16
#define EETH_LEN 36
#define SACK_MODE_MAX 2           /* NONE, SKIP_ONCE, ALWAYS_SKIP */
#define TS_TSR_BIT 0x8000
#define TS_FTYPE_MASK 0xf
#define BTH_F_ACKREQ 0x80
#define BTH_F_R 0x40
#define BTH_F_RTX 0x20
#define BTH_F_TS 0x10

enum {
    OP_WRITE_FIRST = 0xc6, OP_WRITE_MIDDLE = 0xc7, OP_WRITE_LAST = 0xc8,
    OP_WRITE_LAST_IMM = 0xc9, OP_WRITE_ONLY = 0xca, OP_WRITE_ONLY_IMM = 0xcb,
    OP_ACK = 0xd1, OP_ENDPOINT_REQ = 0xd8, OP_ENDPOINT_RESP = 0xd9, OP_SACK = 0xdc,
    OP_NACK = 0xdd, OP_RELIABILITY_PROBE = 0xde,
};

static inline uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static int known_opcode(uint32_t op)
{
    switch (op) {
    case OP_WRITE_FIRST: case OP_WRITE_MIDDLE: case OP_WRITE_LAST: case OP_WRITE_LAST_IMM:
    case OP_WRITE_ONLY: case OP_WRITE_ONLY_IMM: case OP_ACK: case OP_ENDPOINT_REQ:
    case OP_ENDPOINT_RESP: case OP_SACK: case OP_NACK: case OP_RELIABILITY_PROBE:
        return 1;
    }
    return 0;
}

static int known_nack_reason(uint32_t r)   /* constants.NackReason */
{
    return r == 0x01 || r == 0x02 || r == 0x06 || r == 0x07 || r == 0x0a || r == 0x0b ||
           r == 0x19;
}

static int known_endpoint_op(uint32_t op) { return op == 0 || op == 1; } /* EndpointOp */

int mrc_ev_order = 0;

void mrc_set_ev_order(int order) { mrc_ev_order = order ? 1 : 0; }

int mrc_dscp_retx = DSCP_TRIMMABLE_RETX;
int mrc_dscp_trimmed = DSCP_TRIMMED;
int mrc_dscp_trimmed_lasthop = DSCP_TRIMMED_LASTHOP;

void mrc_set_dscps(int retx, int trimmed, int trimmed_lasthop)
{
    mrc_dscp_retx = retx & 0x3f;
    mrc_dscp_trimmed = trimmed & 0x3f;
    mrc_dscp_trimmed_lasthop = trimmed_lasthop & 0x3f;
}

#define FAIL(r, text) do { out->why = (text); out->reason = (r); return (r); } while (0)
/* _util.need(): `n` bytes at `off` inside the frame as cut to `end`. 64-bit sums: a
 * header's claimed length never wraps. */
#define NEED(off, n, text) \
    do { if ((uint64_t)(off) + (n) > (uint64_t)end) FAIL(MRC_TRUNCATED, text); } while (0)

/* IPv6.unpack_from after need(): version, then the fields. */
static int ip6_fields(const uint8_t *p, uint32_t *dscp, uint32_t *ecn, uint32_t *flow,
                      uint32_t *nh, uint32_t *plen, uint32_t *hlim)
{
    uint32_t w = be32(p);
    if (w >> 28 != 6)
        return 0;
    uint32_t tc = (w >> 20) & 0xff;
    *dscp = tc >> 2;
    *ecn = tc & 3;
    *flow = w & 0xfffff;
    *plen = be16(p + 4);
    *nh = p[6];
    *hlim = p[7];
    return 1;
}

/* udp6_checksum_ok() of the n-byte datagram at udp whose bytes sum to `part`
 * (mrc_sum_part): a zero checksum never verifies (IPv6 forbids it). */
static int checksum_ok(const uint8_t *src, const uint8_t *dst, const uint8_t *udp, size_t n,
                       uint64_t part)
{
    if (n >= UDP_LEN && udp[6] == 0 && udp[7] == 0)
        return 0;
    return mrc_udp6_sum_part(mrc_tmpl_addr_sum(src, dst), part, n) == 0xffff;
}

/* usid.usid_final(): the block and the last uSID before the first zero one; 0 when the
 * container holds none (usid_final raises ValueError, parse_frame takes it as a failed
 * checksum). */
static int usid_final(const uint8_t *c, uint8_t out[16])
{
    int last = -1;
    for (int i = 4; i < 16; i += 2) {
        if (c[i] == 0 && c[i + 1] == 0)
            break;
        last = i;
    }
    if (last < 0)
        return 0;
    memset(out, 0, 16);
    memcpy(out, c, 4);
    out[4] = c[last];
    out[5] = c[last + 1];
    return 1;
}

int mrc_parse(const uint8_t *buf, size_t len, struct mrc_parsed *out, int verify)
{
    memset(out, 0, sizeof *out);
    /* A frame longer than any IPv6 length could describe is BAD_LENGTH below anyway; the
     * bound keeps every offset in 32 bits. */
    size_t end = len;

    /* Ethernet.unpack_from, then the EtherType. */
    NEED(0, ETH_LEN, "Ethernet header");
    if (be16(buf + 12) != ETH_P_IPV6)
        FAIL(MRC_BAD_ETHERTYPE, "EtherType is not IPv6");

    /* Outer IPv6. */
    NEED(ETH_LEN, IP6_LEN, "IPv6 header");
    const uint8_t *o = buf + ETH_LEN;
    if (!ip6_fields(o, &out->outer_dscp, &out->outer_ecn, &out->outer_flow_label,
                    &out->outer_next_header, &out->outer_payload_length,
                    &out->outer_hop_limit))
        FAIL(MRC_BAD_IP_VERSION, "outer IP version is not 6");
    size_t off = ETH_LEN + IP6_LEN;
    uint64_t ip_end = off + (uint64_t)out->outer_payload_length;
    if (ip_end < len && len > ETH_MIN_FRAME)
        FAIL(MRC_BAD_LENGTH, "frame longer than its outer IPv6 length");
    end = ip_end < len ? (size_t)ip_end : len;
    out->end = (uint32_t)end;
    int lasthop_dscp = out->outer_dscp == (uint32_t)mrc_dscp_trimmed_lasthop;
    int trimmed_dscp = lasthop_dscp || out->outer_dscp == (uint32_t)mrc_dscp_trimmed;

    /* SRH.unpack_from (and _check_tlvs). */
    uint32_t nh = out->outer_next_header;
    if (nh == NH_ROUTING) {
        NEED(off, SRH_FIXED, "SRH");
        const uint8_t *s = buf + off;
        uint32_t hel = s[1], last = s[4], sl = s[3];
        if (s[2] != SRH_TYPE)
            FAIL(MRC_BAD_SRH, "SRH routing type is not 4");
        uint32_t seg_bytes = 16 * (last + 1), total = SRH_FIXED + 8 * hel;
        if (seg_bytes > 8 * hel)
            FAIL(MRC_BAD_SRH, "SRH last entry beyond its length");
        if (sl > last + 1)  /* last + 1: a reduced SRH (RFC 8754 4.3.1.1) */
            FAIL(MRC_BAD_SRH, "SRH segments left beyond last entry + 1");
        NEED(off, total, "SRH segment list");
        const uint8_t *t = s + SRH_FIXED + seg_bytes;
        uint32_t n = total - SRH_FIXED - seg_bytes, i = 0;
        while (i < n) {
            if (t[i] == 0) {  /* Pad1 */
                i++;
                continue;
            }
            if (i + 2 > n || i + 2 + t[i + 1] > n)
                FAIL(MRC_BAD_SRH, "SRH TLV overruns the header");
            i += 2 + t[i + 1];
        }
        out->srh_off = (uint32_t)off;
        out->srh_next_header = s[0];
        out->srh_segments_left = sl;
        out->srh_last_entry = last;
        out->srh_flags = s[5];
        out->srh_tag = be16(s + 6);
        out->srh_tlv_off = (uint32_t)(off + SRH_FIXED + seg_bytes);
        out->srh_tlv_len = n;
        off += total;
        nh = s[0];
    }

    /* Inner IPv6; every inner layer claims where the frame ends ("claims" in frame.py). */
    uint64_t claimed = 0;
    int have_claim = 0, length_mismatch = 0;
#define CLAIM(v) do { uint64_t v_ = (v); \
        if (!have_claim) { claimed = v_; have_claim = 1; } \
        else if (v_ != claimed) length_mismatch = 1; } while (0)
    if (nh == NH_IPV6) {
        NEED(off, IP6_LEN, "IPv6 header");
        if (!ip6_fields(buf + off, &out->inner_dscp, &out->inner_ecn, &out->inner_flow_label,
                        &out->inner_next_header, &out->inner_payload_length,
                        &out->inner_hop_limit))
            FAIL(MRC_BAD_IP_VERSION, "inner IP version is not 6");
        out->inner_off = (uint32_t)off;
        off += IP6_LEN;
        if (out->inner_next_header != NH_UDP)
            FAIL(MRC_BAD_NEXT_HEADER, "inner next header is not UDP");
        CLAIM(off + (uint64_t)out->inner_payload_length);
    } else if (nh != NH_UDP) {
        FAIL(MRC_BAD_NEXT_HEADER, "next header is neither UDP nor IPv6");
    }
    size_t icrc_from = out->inner_off ? out->inner_off : off;

    /* UDP. */
    NEED(off, UDP_LEN, "UDP header");
    const uint8_t *u = buf + off;
    out->sport = be16(u);
    out->dport = be16(u + 2);
    out->udp_length = be16(u + 4);
    out->udp_checksum = be16(u + 6);
    if (out->dport != UDP_PORT)
        FAIL(MRC_BAD_UDP_PORT, "UDP destination port is not 4791");
    if (out->udp_length < UDP_LEN + BTH_LEN + ICRC_LEN)
        FAIL(MRC_BAD_LENGTH, "UDP length cannot hold BTH and ICRC");
    out->udp_off = (uint32_t)off;
    CLAIM(off + (uint64_t)out->udp_length);
    off += UDP_LEN;

    /* BTH.unpack_from. */
    NEED(off, BTH_LEN, "BTH");
    const uint8_t *b = buf + off;
    uint32_t op = b[0], b1 = b[1], flags = b[8];
    if (!known_opcode(op))
        FAIL(MRC_BAD_OPCODE, "unknown opcode");
    if ((b1 & 0x0f) != 0)
        FAIL(MRC_BAD_VERSION, "BTH TVer is not 0");
    out->opcode = op;
    out->se = b1 >> 7;
    out->migreq = (b1 >> 6) & 1;
    out->pad = (b1 >> 4) & 3;
    out->tver = b1 & 0x0f;
    out->pkey = be16(b + 2);
    out->dest_qp = be32(b + 4) & 0xffffff;
    out->psn = be32(b + 8) & 0xffffff;
    out->ack_req = !!(flags & BTH_F_ACKREQ);
    out->r = !!(flags & BTH_F_R);
    out->rtx = !!(flags & BTH_F_RTX);
    out->ts = !!(flags & BTH_F_TS);
    off += BTH_LEN;
    out->ev = mrc_ev_of(out->sport, out->outer_flow_label);
    out->ce = out->outer_ecn == ECN_CE;

    int endpoint_op = op == OP_ENDPOINT_REQ || op == OP_ENDPOINT_RESP;
    if (out->dest_qp == ENDPOINT_QPN && !endpoint_op)
        FAIL(MRC_BAD_FIELD, "non-endpoint opcode to the endpoint QPN");
    int is_data = op >= OP_WRITE_FIRST && op <= OP_WRITE_ONLY_IMM;
    out->is_data = is_data;
    if (is_data) {
        NEED(off, METH_LEN, "METH");
        out->rqmsn = be16(buf + off);
        out->msn = be16(buf + off + 2);
        off += METH_LEN;
        if (out->ts) {
            NEED(off, TSETH_LEN, "TSETH");
            uint32_t w = be16(buf + off + 2);
            out->has_tseth = 1;
            out->timestamp = be16(buf + off);
            out->tsr = !!(w & TS_TSR_BIT);
            out->ftype = w & TS_FTYPE_MASK;
            off += TSETH_LEN;
        }
        NEED(off, RETH_LEN, "RETH");
        out->va = be64(buf + off);
        out->rkey = be32(buf + off + 8);
        out->length = be32(buf + off + 12);
        off += RETH_LEN;
        if (op == OP_WRITE_LAST_IMM || op == OP_WRITE_ONLY_IMM) {
            NEED(off, IMMDT_LEN, "ImmDt");
            out->has_imm = 1;
            out->imm = be32(buf + off);
            off += IMMDT_LEN;
        }
        CLAIM(off + (uint64_t)out->length + ICRC_LEN);
    } else if (op == OP_SACK) {
        NEED(off, SETH_LEN, "SETH");
        const uint8_t *s = buf + off;
        uint32_t m = (s[1] >> 5) & 3;
        if (m > SACK_MODE_MAX)
            FAIL(MRC_BAD_FIELD, "unknown SACK M field");
        NEED(off + SETH_LEN, CC_LEN, "CC_STATE");
        const uint8_t *c = s + SETH_LEN;
        out->has_seth = 1;
        out->mode = m;
        out->pr = (s[1] >> 1) & 1;
        out->ack_offset = (int16_t)be16(s + 2);
        out->sack_ev = be32(s + 4);
        out->spdcid = be16(s + 8);
        out->dpdcid = be16(s + 10);
        out->cack_psn = be32(s + 12) & 0xffffff;
        out->cc_type = s[16] >> 4;
        out->cc_flags = s[16] & 0xf;
        out->mpr = s[17];
        out->sack_offset = (int16_t)be16(s + 18);
        out->bitmap = be64(s + 20);
        out->ts_echo = be16(c);
        out->ooo_count = be16(c + 2) & 0x7fff;
        out->restore_cwnd = c[4] >> 7;
        out->window_penalty = c[4] & 0x7f;
        out->rcvd_bytes = be32(c + 4) & 0xffffff;
        off += SETH_LEN + CC_LEN;
    } else if (op == OP_ACK) {
        NEED(off, AETH_LEN, "AETH");
        out->has_aeth = 1;
        out->aeth_syndrome = buf[off];
        out->aeth_msn = be32(buf + off) & 0xffffff;
        off += AETH_LEN;
    } else if (op == OP_NACK) {
        NEED(off, NETH_LEN, "NETH");
        const uint8_t *n = buf + off;
        if (!known_nack_reason(n[2]))
            FAIL(MRC_BAD_FIELD, "unknown NACK reason");
        out->has_neth = 1;
        out->nack_reason = n[2];
        out->nack_vendor = n[3];
        out->nack_ev = be32(n + 4);
        out->nack_spdcid = be16(n + 8);
        out->nack_dpdcid = be16(n + 10);
        out->nack_psn = be32(n + 12) & 0xffffff;
        out->nack_cc_type = n[16] >> 4;
        out->nack_cc_flags = n[16] & 0xf;
        out->nack_ts_echo = be16(n + 18);
        off += NETH_LEN;
    } else if (op == OP_RELIABILITY_PROBE) {
        NEED(off, PETH_LEN, "PETH");
        const uint8_t *p = buf + off;
        uint32_t w = be16(p + 14);
        out->has_probe = 1;
        out->probe_vendor = p[3];
        out->probe_id = be16(p + 4);
        out->probe_spdcid = be16(p + 8);
        out->probe_dpdcid = be16(p + 10);
        out->probe_timestamp = be16(p + 12);
        out->probe_tsr = !!(w & TS_TSR_BIT);
        out->probe_ftype = w & TS_FTYPE_MASK;
        off += PETH_LEN;
    } else {  /* ENDPOINT_REQ / ENDPOINT_RESP: known_opcode() closed the set */
        if (out->dest_qp != ENDPOINT_QPN)
            FAIL(MRC_BAD_FIELD, "endpoint operation to a connected QPN");
        const uint8_t *e = buf + off;
        if (op == OP_ENDPOINT_REQ) {
            NEED(off, ERTH_LEN, "ERTH");
            if (!known_endpoint_op(e[1] & 3))
                FAIL(MRC_BAD_FIELD, "unknown endpoint op");
            uint32_t w = be16(e + 14);
            out->has_erth = 1;
            out->ep_op = e[1] & 3;
            out->ep_vendor = e[3];
            out->ep_port_mask = be32(e + 4);
            out->ep_timestamp = be16(e + 12);
            out->ep_tsr = !!(w & TS_TSR_BIT);
            out->ep_ftype = w & TS_FTYPE_MASK;
            off += ERTH_LEN;
        } else {
            NEED(off, EETH_LEN, "EETH");
            if (!known_endpoint_op((e[1] >> 4) & 3))
                FAIL(MRC_BAD_FIELD, "unknown endpoint op");
            out->has_eeth = 1;
            out->ep_op = (e[1] >> 4) & 3;
            out->ep_timestamp = be16(e + 28);
            off += EETH_LEN;
        }
    }
    if (!is_data)
        CLAIM(off + ICRC_LEN);
#undef CLAIM

    /* Every inner layer must claim the same end; the outer IPv6 must agree too unless a
     * switch marked the frame trimmed (see parse_frame). */
    if (length_mismatch)
        FAIL(MRC_BAD_LENGTH, "inner headers disagree on the frame's end");
    if (ip_end != claimed && !(is_data && trimmed_dscp && off <= ip_end && ip_end < claimed))
        FAIL(MRC_BAD_LENGTH, "outer IPv6 length disagrees with the inner headers");

    int shortf = end < claimed;
    if (is_data) {
        out->trimmed = trimmed_dscp || shortf;
        uint64_t pend = off + (uint64_t)out->length;
        if (pend > end)
            pend = end;
        out->payload_off = (uint32_t)off;
        out->payload_len = (uint32_t)(pend - off);
    } else if (shortf) {
        FAIL(MRC_TRUNCATED, "control frame shorter than its headers");
    }
    out->src_off = (uint32_t)(out->inner_off ? out->inner_off + 8 : ETH_LEN + 8);
    if (out->trimmed) {
        out->trim_lasthop = (uint32_t)lasthop_dscp;
        return MRC_OK;
    }

    /* Here end == claimed == ip_end: the frame is exactly as long as its headers say. The
     * UDP datagram's sum is taken in parts: a data frame's payload by the ICRC's pass over
     * it (mrc_icrc_sum), when the covered span is even (its ICRC then starts at an even
     * offset of the datagram); the headers before and the ICRC after on their own. */
    uint64_t part = 0;
    int have_part = 0;
    if (verify & MRC_VERIFY_ICRC) {
        const uint8_t *ic = buf + end - ICRC_LEN;
        uint32_t got = (uint32_t)ic[0] | (uint32_t)ic[1] << 8 | (uint32_t)ic[2] << 16 |
                       (uint32_t)ic[3] << 24;  /* stored little-endian (icrc.py) */
        size_t covered = end - ICRC_LEN - icrc_from;
        uint32_t crc;
        if ((verify & MRC_VERIFY_CHECKSUM) && covered >= 64 && !(covered & 1)) {
            crc = mrc_icrc_sum(buf + icrc_from, covered, out->inner_off != 0, &part);
            part += mrc_sum_part(buf + out->udp_off, icrc_from + 64 - out->udp_off) +
                    mrc_sum_part(ic, ICRC_LEN);
            have_part = 1;
        } else {
            crc = mrc_icrc(buf + icrc_from, covered, out->inner_off != 0);
        }
        if (crc != got)
            FAIL(MRC_BAD_ICRC, "ICRC does not verify");
    }
    if (verify & MRC_VERIFY_CHECKSUM) {
        const uint8_t *udp = buf + out->udp_off;
        size_t n = end - out->udp_off;
        if (!have_part)
            part = mrc_sum_part(udp, n);
        int ok;
        if (out->inner_off) {
            const uint8_t *in = buf + out->inner_off;
            ok = checksum_ok(in + 8, in + 24, udp, n, part);
        } else if (out->srh_off) {
            /* the final segment, segment list[0], is the upper-layer destination; in
             * MRC's form a uSID container, fully shifted */
            const uint8_t *fs = buf + out->srh_off + SRH_FIXED;
            uint8_t fin[16];
            ok = checksum_ok(o + 8, fs, udp, n, part) ||
                 (usid_final(fs, fin) && checksum_ok(o + 8, fin, udp, n, part));
        } else {
            /* uSID without an inner header: the fully shifted container; a plain IPv6
             * frame uses its destination as it is. */
            uint8_t fin[16];
            ok = checksum_ok(o + 8, o + 24, udp, n, part) ||
                 (usid_final(o + 24, fin) && checksum_ok(o + 8, fin, udp, n, part));
        }
        if (!ok)
            FAIL(MRC_BAD_CHECKSUM, "UDP checksum does not verify");
    }
    return MRC_OK;
}
