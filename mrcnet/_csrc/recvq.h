/* mrcnet C: a QP's posted receives (recvq.c), bound by mrcnet/core/recvq.py, whose
 * RecvQueue (a deque) is its Python twin.
 *
 * The responder completes a write-with-immediate with the oldest posted receive's
 * wr_id. Kept here, in C, the receive lane (rxlane.h) takes that wr_id itself when it
 * writes the completion straight into the client's ring; Python appends (post_recv),
 * pops (the per-frame path, a QP's flush) and counts through the same queue. */
#ifndef MRCNET_RECVQ_H
#define MRCNET_RECVQ_H

#include <stdint.h>

/* cffi: begin */
/* wr_ids, oldest first: n of them from ring slot head (cap slots, a power of 2, grown
 * by doubling). */
struct mrc_recvq {
    uint64_t *wr;
    uint32_t cap, head, n;
};

/* An empty queue, or NULL if out of memory; and its release. */
struct mrc_recvq *mrc_recvq_new(void);
void mrc_recvq_free(struct mrc_recvq *q);
/* Append ``wr_id``. Returns 0, or -1 if out of memory (nothing appended). */
int mrc_recvq_push(struct mrc_recvq *q, uint64_t wr_id);
/* Take the oldest wr_id out (0 from an empty queue: look at n first). */
uint64_t mrc_recvq_pop(struct mrc_recvq *q);
/* The i-th oldest (i < n), left in place. */
uint64_t mrc_recvq_at(const struct mrc_recvq *q, uint32_t i);
/* cffi: end */

#endif
