/* mrcnet C: the receive path's frame parser (parsed.c) and its flat record, the twin of
 * mrcnet/wire/parsed.py (PyParsed, py_parse), whose Python file also binds them. */
#ifndef MRCNET_PARSED_H
#define MRCNET_PARSED_H

#include <stdint.h>
#include <stddef.h>

/* cffi: begin */
/* mrc_parse() result codes: 0 = accepted, else the mrcnet.errors.MalformedReason it maps
 * to (mrcnet/wire/parsed.py holds the mapping; a test checks both lists agree). */
#define MRC_OK                 0
#define MRC_TRUNCATED          1
#define MRC_BAD_ETHERTYPE      2
#define MRC_BAD_IP_VERSION     3
#define MRC_BAD_LENGTH         4
#define MRC_BAD_NEXT_HEADER    5
#define MRC_BAD_SRH            6
#define MRC_BAD_UDP_PORT       7
#define MRC_BAD_CHECKSUM       8
#define MRC_BAD_ICRC           9
#define MRC_BAD_OPCODE        10
#define MRC_BAD_VERSION       11
#define MRC_BAD_FIELD         12

/* mrc_parse() `verify` bits. */
#define MRC_VERIFY_ICRC      1
#define MRC_VERIFY_CHECKSUM  2

/* Every field of an accepted frame, flat. Offsets are from the start of the frame;
 * addresses, MACs and SRH segments are not copied (read them at their offsets). Fields of
 * headers the frame does not have are 0. Mirrors mrcnet.wire.parsed.PyParsed field for field. */
struct mrc_parsed {
    int32_t  reason;         /* MRC_OK or MRC_BAD_... (also the return value) */
    const char *why;         /* static text naming the failed check (reason != 0) */
    /* where things are */
    uint32_t end;            /* where the frame ends: IPv6 length, or the buffer if shorter */
    uint32_t src_off;        /* the sender's address: inner IPv6 source, else outer source */
    uint32_t srh_off;        /* SRH (0: none) */
    uint32_t inner_off;      /* inner IPv6 header (0: none) */
    uint32_t udp_off;
    uint32_t payload_off;    /* data payload (0 for control frames) */
    uint32_t payload_len;    /* bytes present: RETH length, or fewer when trimmed */
    /* outer IPv6 */
    uint32_t outer_dscp, outer_ecn, outer_flow_label, outer_next_header;
    uint32_t outer_payload_length, outer_hop_limit;
    /* SRH */
    uint32_t srh_next_header, srh_segments_left, srh_last_entry, srh_flags, srh_tag;
    uint32_t srh_tlv_off, srh_tlv_len;
    /* inner IPv6 */
    uint32_t inner_dscp, inner_ecn, inner_flow_label, inner_next_header;
    uint32_t inner_payload_length, inner_hop_limit;
    /* UDP */
    uint32_t sport, dport, udp_length, udp_checksum;
    /* BTH */
    uint32_t opcode, dest_qp, psn, ack_req, rtx, ts, r, se, migreq, pad, tver, pkey;
    /* derived */
    uint32_t ev;             /* UDP source port and outer flow label & 0xffff, in the EV
                                order set by mrc_set_ev_order (default: sport = low 16) */
    uint32_t ce;             /* outer ECN is CE */
    uint32_t trimmed;        /* data frame cut short or marked with a trimmed DSCP */
    uint32_t trim_lasthop;   /* trimmed and marked TRIMMED_LASTHOP (mrc_set_dscps) */
    uint32_t is_data;
    /* METH, TSETH, RETH, ImmDt (data) */
    uint64_t va;
    uint32_t rkey, length;
    uint32_t has_imm, imm, rqmsn, msn, has_tseth, timestamp, tsr, ftype;
    /* AETH (ACK) */
    uint32_t has_aeth, aeth_syndrome, aeth_msn;
    /* SETH + CC_STATE (SACK) */
    uint32_t has_seth, sack_ev, cack_psn;
    int32_t  ack_offset, sack_offset;
    uint32_t mpr, mode, pr, spdcid, dpdcid, cc_type, cc_flags;
    uint64_t bitmap;
    uint32_t ts_echo, ooo_count, restore_cwnd, window_penalty, rcvd_bytes;
    /* NETH (NACK) */
    uint32_t has_neth, nack_reason, nack_vendor, nack_ev, nack_psn, nack_spdcid, nack_dpdcid;
    uint32_t nack_cc_type, nack_cc_flags, nack_ts_echo;
    /* PETH (RELIABILITY_PROBE) */
    uint32_t has_probe, probe_id, probe_vendor, probe_spdcid, probe_dpdcid, probe_timestamp;
    uint32_t probe_tsr, probe_ftype;
    /* ERTH (ENDPOINT_REQ) / EETH (ENDPOINT_RESP: op and timestamp only) */
    uint32_t has_erth, has_eeth, ep_op, ep_vendor, ep_port_mask, ep_timestamp, ep_tsr;
    uint32_t ep_ftype;
};

/* Parse one frame exactly as mrcnet.wire.parse_frame does: the same checks in the same
 * order, so the same accept/reject decision and reason for every input, the same trimmed
 * flag and the same fields. `verify` (MRC_VERIFY_* bits) checks the ICRC and the UDP
 * checksum of untrimmed frames. Fills *out and returns out->reason. Reads only
 * buf[0:len]. */
int mrc_parse(const uint8_t *buf, size_t len, struct mrc_parsed *out, int verify);

/* Which half of the EV rides in the UDP source port, for the parser and the template
 * builders: 0 (default) the low 16 bits, 1 the high 16 bits (mrcnet.wire.set_ev_order). */
void mrc_set_ev_order(int order);
/* The operator's DSCP classes (mrcnet.wire.set_dscp_classes): retransmitted data
 * (templates), trimmed, trimmed at the last hop (the parser). */
void mrc_set_dscps(int retx, int trimmed, int trimmed_lasthop);
/* cffi: end */

extern int mrc_ev_order;
extern int mrc_dscp_retx, mrc_dscp_trimmed, mrc_dscp_trimmed_lasthop;

/* The EV of a UDP source port and a flow label; and the two halves of an EV. */
static inline uint32_t mrc_ev_of(uint32_t sport, uint32_t flow_label)
{
    return mrc_ev_order ? sport << 16 | (flow_label & 0xffff)
                        : (flow_label & 0xffff) << 16 | sport;
}
static inline uint32_t mrc_ev_sport(uint32_t ev) { return mrc_ev_order ? ev >> 16 : ev & 0xffff; }
static inline uint32_t mrc_ev_flow(uint32_t ev) { return mrc_ev_order ? ev & 0xffff : ev >> 16; }

#endif
