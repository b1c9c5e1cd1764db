/* mrcnet C: data frames patched from a per-(QP, destination) template, and control frames
 * finished in place (template.c): the twin of mrcnet/wire/template.py's DataTemplate,
 * whose Python file also binds them (CTemplate, RunPatcher, FrameFinisher). */
#ifndef MRCNET_TEMPLATE_H
#define MRCNET_TEMPLATE_H

#include <stdint.h>
#include <stddef.h>

/* mrc_tmpl_addr_sum (the template's pseudo_sum) is checksum.h's. */

/* cffi: begin */
#define MRC_TMPL_HDR_MAX 512

/* Filled once per (QP, destination) by Python from a frame the reference builder made.
 * Offsets are from the start of the Ethernet frame. */
struct mrc_tmpl {
    uint8_t  hdr[MRC_TMPL_HDR_MAX]; /* Ethernet .. end of BTH, copied to every frame */
    uint32_t hdr_len;
    uint32_t off_outer_ip;   /* outer IPv6 header */
    uint32_t off_srh_segs;   /* first SRH segment (0: no SRH) */
    uint32_t srh_segs_len;   /* bytes of segment list (16 x n) */
    uint32_t off_inner_ip;   /* inner IPv6 header, where the ICRC starts (0: none; the
                                ICRC then starts at the UDP header) */
    uint32_t off_udp;
    uint32_t off_bth;
    uint32_t rkey;           /* RETH rkey of every frame */
    uint32_t icrc_le;        /* 1: ICRC stored little-endian (RoCEv2), 0: big-endian */
    uint32_t pseudo_sum;     /* folded sum of the pseudo-header addresses (native order) */
    uint8_t  pseudo_src[16]; /* pseudo-header source, for a per-packet pseudo_dst */
};

/* Per-packet extension flags for mrc_patch_data(). */
#define MRC_EXT_IMM   1u  /* ImmDt (imm) follows the RETH */
#define MRC_EXT_TSETH 2u  /* TSETH (timestamp) follows the METH */

/* Write one data frame into out[0:cap]: the template's headers patched with this
 * packet's opcode, BTH flag byte (bth_flags: A/R/RTX/TS, BTH byte 8; byte 1 stays the
 * template's), PSN, EV (UDP source port and the low 16 bits of the outer and inner flow
 * labels, in mrc_set_ev_order's order), outer destination (16 bytes; NULL keeps the template's), SRH segments
 * (srh_segs_len bytes, wire order; NULL keeps), checksum pseudo-header destination (NULL:
 * the template's; only frames without an inner IPv6 header need one when the path
 * changes), METH (the word meth = RQMSN << 16 | MSN), the optional TSETH (ext flags),
 * RETH (virtual address, the template's rkey, length = payload_len), the optional ImmDt,
 * the payload, every length field, the ICRC and the UDP checksum.
 * Returns the frame length, or 0 if it does not fit `cap` or an IPv6 length field. */
size_t mrc_patch_data(uint8_t *out, size_t cap, const struct mrc_tmpl *t,
                      uint32_t opcode, uint32_t bth_flags, uint32_t psn, uint32_t ev,
                      const uint8_t *outer_da, const uint8_t *srh_segs,
                      const uint8_t *pseudo_dst, uint64_t va,
                      uint32_t ext, uint32_t meth, uint32_t imm, uint32_t timestamp,
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
 * seg, payload_len)) of payload; meth, imm and timestamp are the run's. lens[i] gets the
 * length of frame i. Returns the bytes written, 0 if a frame does not fit. */
size_t mrc_patch_run(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                     const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                     const uint8_t *flags, const uint8_t *ext, uint32_t psn0, uint64_t va0,
                     const uint8_t *payload, size_t payload_len, size_t seg,
                     uint32_t meth, uint32_t imm, uint32_t timestamp, uint32_t *lens);

/* Payloads of this many bytes or more go to the socket from where they lie (the
 * client's region) instead of being copied into the frame (mrc_patch_run_gather): below
 * it, an iovec of its own costs the kernel more than the copy saves. */
#define MRC_GATHER_MIN 1024
/* mrc_patch_run, where a frame's payload (MRC_GATHER_MIN bytes or more, of an even length
 * and at an even offset of the datagram: every frame of a run but an odd-length last)
 * is not copied: out gets that frame's headers followed by its ICRC, lens[i] their
 * length, and plens[i] the payload's (bytes [i * seg, i * seg + plens[i]) of payload,
 * which goes between the two: mrc_sendq_add_gather); plens[i] = 0 for a frame written
 * whole. With plens NULL, mrc_patch_run. */
size_t mrc_patch_run_gather(uint8_t *out, size_t cap, unsigned n,
                            const struct mrc_path *paths, const uint16_t *slot,
                            const uint32_t *ev, const uint8_t *op, const uint8_t *flags,
                            const uint8_t *ext, uint32_t psn0, uint64_t va0,
                            const uint8_t *payload, size_t payload_len, size_t seg,
                            uint32_t meth, uint32_t imm, uint32_t timestamp, uint32_t *lens,
                            uint32_t *plens);
/* n single-packet messages (WRITE_ONLY[_IMM] of n work requests) written back to back
 * into out (cap bytes), each exactly what mrc_patch_data writes: frame i goes on
 * paths[slot[i]] with EV ev[i], opcode op[i], BTH flags flags[i], extensions ext[i], PSN
 * (psn0 + i) mod 2^24, address va[i], METH meth[i], immediate imm[i] and the next
 * plen[i] bytes of payload (the messages' payloads laid end to end); the timestamp is
 * the run's. lens[i] gets the length of frame i. Returns the bytes written, 0 if a
 * frame does not fit. */
size_t mrc_patch_msgs(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                      const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                      const uint8_t *flags, const uint8_t *ext, uint32_t psn0,
                      const uint64_t *va, const uint32_t *meth, const uint32_t *imm,
                      const uint8_t *payload, const uint32_t *plen, uint32_t timestamp,
                      uint32_t *lens);
/* cffi: end */

#endif
