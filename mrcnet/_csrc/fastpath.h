/* mrcnet C fast path: small, byte-identical to the Python reference in mrcnet.wire.
 *
 * Four jobs only: checksums (UDP/IPv6, ICRC), patching a per-(QP, destination) frame
 * template for each data packet, sendmmsg/recvmmsg batching on a packet socket, and
 * parsing a received frame (parse.c, the twin of mrcnet.wire.parse_frame).
 * The protocol logic stays in Python; every function here has a Python twin that the
 * tests compare byte for byte (mrcnet/fastpath.py, mrcnet/wire/template.py). */
#ifndef MRCNET_FASTPATH_H
#define MRCNET_FASTPATH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* sendmmsg, recvmmsg, struct mmsghdr */
#endif
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/if_packet.h>

/* cffi_build.py gives cffi the declarations between these markers. */
/* cffi: begin */

/* ---- checksums -------------------------------------------------------------------- */

/* Internet checksum (RFC 1071) of UDP over IPv6: pseudo-header (src, dst, length, next
 * header 17) plus the UDP header and payload, with the checksum field taken as is (the
 * caller zeroes it to compute, or leaves it to verify). Returns the value to store
 * (a computed 0 is sent as 0xffff, RFC 8200 section 8.1). */
uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                           const uint8_t *udp, size_t udp_len);

/* One's-complement sum of the pseudo-header and UDP datagram, folded to 16 bits
 * (0xffff for a datagram whose stored checksum is right). */
uint16_t mrc_udp6_sum(const uint8_t *src, const uint8_t *dst,
                      const uint8_t *udp, size_t udp_len);

/* CRC-32 as zlib's crc32() computes it (crc32.c: PCLMULQDQ folding when the CPU has it,
 * else a slicing-by-8 table). mrc_crc32_raw works on the uninverted state:
 * mrc_crc32(c, p, n) == ~mrc_crc32_raw(~c, p, n). */
uint32_t mrc_crc32(uint32_t crc, const uint8_t *p, size_t n);
uint32_t mrc_crc32_raw(uint32_t c, const uint8_t *p, size_t n);
/* Select the CRC code: 1 = PCLMULQDQ if the CPU has it, 0 = table (tests use both).
 * Returns 1 if PCLMULQDQ is now in use. */
int mrc_crc32_impl(int want);
/* UDP checksum sums with AVX2 when want and the CPU has it (else the scalar loop);
 * returns whether AVX2 is now used. On by default; tests compare the two. */
int mrc_sum_impl(int want);

/* RoCEv2 invariant CRC: CRC-32 (zlib's) of 8 bytes of 0xff, then `len` bytes from `p`
 * (up to but not including the ICRC) with the fields that change in flight taken as all
 * ones. With has_ip, `p` is the inner IPv6 header (traffic class, flow label and hop limit
 * masked), else the UDP header; then the UDP checksum and the BTH reserved byte are
 * masked. Returns zlib's value (the reference stores it little-endian), or 0 if `len`
 * cannot hold the headers. Mirrors mrcnet/wire/icrc.py. */
uint32_t mrc_icrc(const uint8_t *p, size_t len, int has_ip);

/* ---- data frame template ---------------------------------------------------------- */

#define MRC_TMPL_HDR_MAX 512

/* Filled once per (QP, destination) by Python from a frame the reference builder made.
 * Offsets are from the start of the Ethernet frame. */
struct mrc_tmpl {
    uint8_t  hdr[MRC_TMPL_HDR_MAX]; /* Ethernet .. end of RETH, copied to every frame */
    uint32_t hdr_len;
    uint32_t off_outer_ip;   /* outer IPv6 header */
    uint32_t off_srh_segs;   /* first SRH segment (0: no SRH) */
    uint32_t srh_segs_len;   /* bytes of segment list (16 x n) */
    uint32_t off_inner_ip;   /* inner IPv6 header, where the ICRC starts (0: none; the
                                ICRC then starts at the UDP header) */
    uint32_t off_udp;
    uint32_t off_bth;
    uint32_t off_reth;
    uint32_t imm_first;      /* 1: METH+ImmDt come before TSETH, 0: after */
    uint32_t icrc_le;        /* 1: ICRC stored little-endian (RoCEv2), 0: big-endian */
    uint32_t pseudo_sum;     /* folded sum of the pseudo-header addresses (native order) */
    uint8_t  pseudo_src[16]; /* pseudo-header source, for a per-packet pseudo_dst */
};

/* Folded sum of the pseudo-header addresses, for mrc_tmpl.pseudo_sum. */
uint32_t mrc_tmpl_addr_sum(const uint8_t *src, const uint8_t *dst);

/* Per-packet extension flags for mrc_patch_data(). */
#define MRC_EXT_IMM   1u  /* METH (msn) + ImmDt (imm) follow the RETH */
#define MRC_EXT_TSETH 2u  /* TSETH (timestamp) follows */

/* Write one data frame into out[0:cap]: the template's headers patched with this
 * packet's opcode, BTH flag byte (bth_flags: A/R/RTX/TS, BTH byte 8; byte 1 stays the
 * template's), PSN, EV (UDP source port = ev >> 16, low 16 bits of the outer flow label
 * = ev & 0xffff), outer destination (16 bytes; NULL keeps the template's), SRH segments
 * (srh_segs_len bytes, wire order; NULL keeps), checksum pseudo-header destination (NULL:
 * the template's; only frames without an inner IPv6 header need one when the path
 * changes), RETH virtual address and length (= payload_len), the optional METH/ImmDt/TSETH
 * (ext flags), the payload, every length field, the ICRC and the UDP checksum.
 * Returns the frame length, or 0 if it does not fit `cap` or an IPv6 length field. */
size_t mrc_patch_data(uint8_t *out, size_t cap, const struct mrc_tmpl *t,
                      uint32_t opcode, uint32_t bth_flags, uint32_t psn, uint32_t ev,
                      const uint8_t *outer_da, const uint8_t *srh_segs,
                      const uint8_t *pseudo_dst, uint64_t va,
                      uint32_t ext, uint32_t msn, uint32_t imm, uint32_t timestamp,
                      const uint8_t *payload, size_t payload_len);

/* Finish a frame whose every byte is in place but its ICRC and UDP checksum (a control
 * frame patched from a per-path template): computes the ICRC over frame[icrc_from :
 * len - 4] (from the inner IPv6 header with has_ip, else from the UDP header), stores it
 * little-endian in the last 4 bytes, then the UDP checksum (the datagram at udp_off runs
 * to the end; pseudo_sum from mrc_tmpl_addr_sum). Same bytes as the reference builder. */
void mrc_finish_frame(uint8_t *frame, size_t len, uint32_t icrc_from, int has_ip,
                      uint32_t udp_off, uint32_t pseudo_sum);

/* One path of a sender's data frames: a template and the per-path fields that
 * mrc_patch_data takes (NULL where the path has none). */
struct mrc_path {
    const struct mrc_tmpl *tmpl;
    const uint8_t *outer_da, *srh_segs, *pseudo_dst;
};

/* A run of n data frames of one message, written back to back into out (cap bytes), each
 * exactly what mrc_patch_data writes: frame i goes on paths[slot[i]] with EV ev[i],
 * opcode op[i], BTH flags flags[i] and extension headers ext[i] (MRC_EXT_*), PSN
 * (psn0 + i) mod 2^24, address va0 + i * seg and payload bytes [i * seg, min((i + 1) *
 * seg, payload_len)) of payload; msn, imm and timestamp are the run's. lens[i] gets the
 * length of frame i. Returns the bytes written, 0 if a frame does not fit. */
size_t mrc_patch_run(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                     const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                     const uint8_t *flags, const uint8_t *ext, uint32_t psn0, uint64_t va0,
                     const uint8_t *payload, size_t payload_len, size_t seg,
                     uint32_t msn, uint32_t imm, uint32_t timestamp, uint32_t *lens);

/* ---- batched packet socket I/O ---------------------------------------------------- */

/* Buffers for one batch, allocated once by Python (ffi.new) and reused: `max` message
 * headers, iovecs, sockaddr_ll slots and `max` receive buffers of `bufsize` bytes. */
struct mrc_batch {
    unsigned max;
    uint32_t bufsize;
    struct mmsghdr *msgs;
    struct iovec *iov;
    struct sockaddr_ll *addrs;
    uint8_t *bufs;       /* max * bufsize bytes; frame i lives at bufs + i * bufsize */
    uint32_t *lens;      /* per frame: length (send: filled by caller; recv: by kernel) */
    uint8_t *pkttype;    /* recv: sll_pkttype (PACKET_HOST, PACKET_OUTGOING, ...) */
    int32_t *ifindex;    /* recv: sll_ifindex */
    uint32_t *idx;       /* recv: slot of the k-th kept frame */
};

/* Wires each message header to its iovec; called once after Python fills the pointers. */
void mrc_batch_init(struct mrc_batch *b);

/* Sends n frames with sendmmsg on a bound packet socket: frame i is `lens[i]` bytes, the
 * frames packed back to back from `data`. Returns the number sent (partial when the queue
 * is full, or before a frame that failed), or -errno if the first one failed. */
int mrc_send_batch(int fd, struct mrc_batch *b, const uint8_t *data, unsigned n);

/* Sends the frames already written into the batch's own buffers (slot i, lens[i]). */
int mrc_send_slots(int fd, struct mrc_batch *b, unsigned n);

/* Receives up to min(n, max) frames with recvmmsg(MSG_DONTWAIT unless `wait`), into the
 * batch's buffers. For each kept frame k (frames of packet type PACKET_OUTGOING dropped
 * when skip_outgoing), idx[k] is its slot and lens/pkttype/ifindex[slot] describe it.
 * Returns the number kept; *nrecv gets the number received. 0 on EAGAIN; -errno on error. */
int mrc_recv_batch(int fd, struct mrc_batch *b, unsigned n, int wait, int skip_outgoing,
                   unsigned *nrecv);

/* ---- frame parser ----------------------------------------------------------------- */

/* mrc_parse() result codes: 0 = accepted, else the mrcnet.errors.MalformedReason it maps
 * to (mrcnet/fastpath.py holds the mapping; a test checks both lists agree). */
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
 * headers the frame does not have are 0. Mirrors mrcnet.fastpath.PyParsed field for field. */
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

/* sendmmsg of the n messages b->msgs[0..n-1] already set up: how many went (partial
 * when the socket is full), or -errno if the first one failed (sendq.c uses it too). */
int mrc_send_prepared(int fd, struct mrc_batch *b, unsigned n);

#endif
