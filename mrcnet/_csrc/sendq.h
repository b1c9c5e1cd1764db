/* mrcnet C fast path: the ports' send queues (sendq.c).
 *
 * mrcd's data frames go from the run that built them to sendmmsg with no Python object
 * per frame. mrc_patch_run writes a run's frames back to back into one buffer;
 * mrc_sendq_add_run queues a pointer to each frame on its port's queue; mrc_sendq_send
 * sends a port's queue through the port's batch headers (struct mrc_batch) straight from
 * those buffers and keeps what the socket did not take. The buffers belong to Python
 * (mrcnet.fastpath.SendQueue), which keeps them alive until their frames are gone. */
#ifndef MRCNET_SENDQ_H
#define MRCNET_SENDQ_H

#include "fastpath.h"

/* cffi: begin */
/* One port's frames waiting to go, oldest first: iov[head .. n-1] (cap slots). */
struct mrc_sendq {
    struct iovec *iov;
    uint32_t head, n, cap;
};

/* Queue the n frames of a run, laid back to back from `data` (frame i is lens[i] bytes),
 * frame i on queue port[i] of the nq queues `qs`. A frame for a queue that is full (after
 * moving its waiting frames to the front) or out of range is not queued. Returns how
 * many were queued. */
unsigned mrc_sendq_add_run(struct mrc_sendq *qs, unsigned nq, const uint8_t *data,
                           const uint32_t *lens, const uint16_t *port, unsigned n);

/* Send queue q's frames on fd (a bound packet socket) with sendmmsg, b->max at a time
 * through b's message headers, until the queue is empty or the socket takes no more.
 * Returns the frames sent; *err gets 0 (queue empty), EAGAIN (the socket is full: the
 * rest waits) or the errno of a frame that failed at the head of the queue (left there:
 * the caller decides); *calls gets the sendmmsg calls made. */
unsigned mrc_sendq_send(int fd, struct mrc_batch *b, struct mrc_sendq *q, int *err,
                        unsigned *calls);

/* Drop the k oldest frames of q (all if k is larger); returns how many went. */
unsigned mrc_sendq_drop(struct mrc_sendq *q, unsigned k);
/* cffi: end */

#endif
