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
    uint32_t ev;             /* UDP source port << 16 | outer flow label & 0xffff */
    uint32_t ce;             /* outer ECN is CE */
    uint32_t trimmed;        /* data frame cut short or marked with the trimmed DSCP */
    uint32_t is_data;
    /* RETH, METH + ImmDt, TSETH (data) */
    uint64_t va;
    uint32_t rkey, length;
    uint32_t has_imm, msn, imm, has_tseth, timestamp;
    /* SETH + CC state (SACK, ACK) */
    uint32_t has_seth, sack_ev, cack_psn;
    int32_t  ack_offset, sack_offset;
    uint32_t max_psn_range, mode, ece;
    uint64_t bitmap;
    uint32_t imm_credit, ts_echo, ooo_count, window_penalty, rcvd_bytes;
    /* NETH (NACK) */
    uint32_t has_neth, nack_reason, nack_ev, nack_psn, nack_cack_psn, nack_ts_echo;
    /* probe header (RELIABILITY_PROBE) */
    uint32_t has_probe, probe_id, probe_ev, probe_psn, probe_timestamp;
    /* endpoint header (ENDPOINT_REQ / ENDPOINT_RESP) */
    uint32_t has_endpoint, ep_op, ep_status, ep_request_id, ep_ev, ep_timestamp, ep_port_mask;
};

/* Parse one frame exactly as mrcnet.wire.parse_frame does: the same checks in the same
 * order, so the same accept/reject decision and reason for every input, the same trimmed
 * flag and the same fields. `verify` (MRC_VERIFY_* bits) checks the ICRC and the UDP
 * checksum of untrimmed frames. Fills *out and returns out->reason. Reads only
 * buf[0:len]. */
int mrc_parse(const uint8_t *buf, size_t len, struct mrc_parsed *out, int verify);
/* cffi: end */

#endif
