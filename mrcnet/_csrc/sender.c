/* A sender's new packets recorded, built and queued in one call. See sender.h. */
#include "sender.h"

/* The flag byte and extension bits of each of the n packets, from its opcode. */
static void op_bits(const struct mrc_opbits *b, const uint8_t *op, unsigned n,
                    uint8_t *flags, uint8_t *ext)
{
    for (unsigned i = 0; i < n; i++) {
        flags[i] = b->flags[op[i]];
        ext[i] = b->ext[op[i]];
    }
}

/* The n frames in buf queued (mrc_sendq_add_run; with plens, mrc_sendq_add_gather of
 * payload's), the queues that grew ORed into *grew as mrc_sendq_mark before and
 * mrc_sendq_grown after would give them. */
static int queue_frames(struct mrc_sendq *qs, unsigned nq, const uint8_t *buf,
                        const uint32_t *lens, const uint32_t *plens, const uint8_t *payload,
                        size_t seg, const uint16_t *port, unsigned n, uint32_t *grew)
{
    uint32_t marks[32];
    unsigned m = nq < 32 ? nq : 32;
    mrc_sendq_mark(qs, m, marks);
    unsigned k = plens ? mrc_sendq_add_gather(qs, nq, buf, lens, plens, payload, seg, port, n)
                       : mrc_sendq_add_run(qs, nq, buf, lens, port, n);
    *grew |= mrc_sendq_grown(qs, m, marks);
    return (int)k;
}

int mrc_send_run(struct mrc_txq *t, struct mrc_sendq *qs, unsigned nq,
                 const struct mrc_path *paths, const struct mrc_opbits *bits,
                 const uint16_t *port, const uint16_t *slot, unsigned n, uint64_t seq,
                 const uint32_t *ev, const uint8_t *op, uint32_t wr, uint32_t off0,
                 uint32_t total, uint64_t va0, const uint8_t *payload, size_t payload_len,
                 size_t seg, uint32_t meth, uint32_t imm, double now, uint16_t ts,
                 uint8_t *buf, size_t cap, uint32_t *lens, uint32_t *grew, int gather)
{
    uint8_t flags[MRC_SEND_MAX], ext[MRC_SEND_MAX];
    uint32_t plens[MRC_SEND_MAX];
    if (n > MRC_SEND_MAX)
        return -1;
    op_bits(bits, op, n, flags, ext);
    if (!mrc_patch_run_gather(buf, cap, n, paths, slot, ev, op, flags, ext,
                              (uint32_t)(seq & 0xffffffu), va0, payload, payload_len, seg,
                              meth, imm, ts, lens, gather ? plens : NULL))
        return -1;
    mrc_tx_send(t, seq, n, ev, op, wr, off0, (uint32_t)seg, total, now, ts);
    return queue_frames(qs, nq, buf, lens, gather ? plens : NULL, payload, seg, port, n,
                        grew);
}

int mrc_send_msgs(struct mrc_txq *t, struct mrc_sendq *qs, unsigned nq,
                  const struct mrc_path *paths, const struct mrc_opbits *bits,
                  const uint16_t *port, const uint16_t *slot, unsigned n, uint64_t seq,
                  const uint32_t *ev, const uint8_t *op, const uint32_t *wr,
                  const uint64_t *va, const uint32_t *meth, const uint32_t *imm,
                  const uint8_t *payload, size_t payload_len, const uint32_t *plen,
                  double now, uint16_t ts, uint8_t *buf, size_t cap, uint32_t *lens,
                  uint32_t *grew)
{
    uint8_t flags[MRC_SEND_MAX], ext[MRC_SEND_MAX];
    size_t sum = 0;
    if (n > MRC_SEND_MAX)
        return -1;
    for (unsigned i = 0; i < n; i++)
        sum += plen[i];
    if (sum != payload_len)
        return -1;
    op_bits(bits, op, n, flags, ext);
    if (!mrc_patch_msgs(buf, cap, n, paths, slot, ev, op, flags, ext,
                        (uint32_t)(seq & 0xffffffu), va, meth, imm, payload, plen, ts, lens))
        return -1;
    mrc_tx_send_msgs(t, seq, n, ev, op, wr, plen, now, ts);
    return queue_frames(qs, nq, buf, lens, NULL, payload, 0, port, n, grew);
}
