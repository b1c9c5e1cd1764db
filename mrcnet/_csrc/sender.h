/* mrcnet C: a sender's new packets recorded, built and queued in one call (sender.c),
 * bound by mrcnet/core/sender.py through mrcnet/wire/template.py's RunPatcher: what
 * mrc_tx_send[_msgs] (txtable.h), mrc_patch_run / mrc_patch_msgs (template.h) and
 * mrc_sendq_add_run (batch.h) do one after the other, with the per-packet BTH flags and
 * extension bits derived from each packet's opcode instead of passed as lists. */
#ifndef MRCNET_SENDER_H
#define MRCNET_SENDER_H

#include "batch.h"
#include "template.h"
#include "txtable.h"

/* cffi: begin */
/* The most packets one call takes (the caller sends a longer run its own way). */
#define MRC_SEND_MAX 4096

/* A new packet's BTH flag byte and extension bits (MRC_EXT_*) by its opcode: the
 * sender's rule (mrcnet/core/sender.py: every packet with a timestamp, AckReq on a
 * message's last, ImmDt on the *_IMM opcodes), filled once by Python. */
struct mrc_opbits {
    uint8_t flags[256], ext[256];
};

/* A run of n packets of one work request (table slot ``wr``, ``total`` bytes): the
 * frames mrc_patch_run writes (payload bytes [off0 + i * seg ..) at payload[i * seg],
 * address va0 + i * seg, PSN (seq + i) mod 2^24) into buf (cap bytes, lens[i] each);
 * then, only if every frame fit, mrc_tx_send of them into table t at ``now`` / ``ts``
 * and each frame queued on qs[port[i]] (of nq), the ports whose queue grew ORed into
 * *grew (bit i: port i, the first 32; what mrc_sendq_mark before and mrc_sendq_grown
 * after give). With `gather`, mrc_patch_run_gather's frames and mrc_sendq_add_gather:
 * the payloads go from `payload` itself, which must then stay mapped until the frames
 * have gone (buf needs room for the headers and at most one payload, the odd-length
 * last's). Returns the frames queued, or -1 if a frame did not fit (nothing recorded or
 * queued). */
int mrc_send_run(struct mrc_txq *t, struct mrc_sendq *qs, unsigned nq,
                 const struct mrc_path *paths, const struct mrc_opbits *bits,
                 const uint16_t *port, const uint16_t *slot, unsigned n, uint64_t seq,
                 const uint32_t *ev, const uint8_t *op, uint32_t wr, uint32_t off0,
                 uint32_t total, uint64_t va0, const uint8_t *payload, size_t payload_len,
                 size_t seg, uint32_t meth, uint32_t imm, double now, uint16_t ts,
                 uint8_t *buf, size_t cap, uint32_t *lens, uint32_t *grew, int gather);

/* n single-packet work requests (table slots wr[i], plen[i] bytes each, their payloads
 * end to end at ``payload``, payload_len bytes in all): the frames mrc_patch_msgs
 * writes (address va[i], METH meth[i], immediate imm[i]) into buf, then
 * mrc_tx_send_msgs and the queues, as mrc_send_run (-1 also when the plen[i] do not add
 * up to payload_len). */
int mrc_send_msgs(struct mrc_txq *t, struct mrc_sendq *qs, unsigned nq,
                  const struct mrc_path *paths, const struct mrc_opbits *bits,
                  const uint16_t *port, const uint16_t *slot, unsigned n, uint64_t seq,
                  const uint32_t *ev, const uint8_t *op, const uint32_t *wr,
                  const uint64_t *va, const uint32_t *meth, const uint32_t *imm,
                  const uint8_t *payload, size_t payload_len, const uint32_t *plen,
                  double now, uint16_t ts, uint8_t *buf, size_t cap, uint32_t *lens,
                  uint32_t *grew);
/* cffi: end */

#endif
