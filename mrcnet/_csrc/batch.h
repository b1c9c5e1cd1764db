/* mrcnet C: sendmmsg/recvmmsg on a bound packet socket (batch.c), through a batch's
 * buffers (buffers.h): the twin of mrcnet/io/batch.py's PyBatchIO (its Python file binds
 * them as CBatchIO); and the ports' send queues (struct mrc_sendq, mrcnet.io.batch.SendQueue).
 *
 * The send queues: mrcd's data frames go from the run that built them to sendmmsg with no
 * Python object per frame. mrc_patch_run (template.h) writes a run's frames back to back
 * into one buffer; mrc_sendq_add_run queues a pointer to each frame on its port's queue;
 * mrc_sendq_send sends a port's queue through the port's batch headers straight from
 * those buffers and keeps what the socket did not take. The buffers belong to Python
 * (SendQueue), which keeps them alive until their frames are gone. */
#ifndef MRCNET_BATCH_H
#define MRCNET_BATCH_H

#include "buffers.h"

/* cffi: begin */
/* The iovecs a queued frame may take: its headers, its payload where it lies, its ICRC
 * (mrc_sendq_add_gather); a frame written whole takes one. */
#define MRC_SENDQ_IOV 3

/* One port's frames waiting to go, oldest first: frames head .. n-1 of cap, frame j in
 * the niov[j] iovecs from iov[MRC_SENDQ_IOV * j] (iov: MRC_SENDQ_IOV * cap of them). */
struct mrc_sendq {
    struct iovec *iov;
    uint8_t *niov;
    uint32_t head, n, cap;
};

/* Queue the n frames of a run, laid back to back from `data` (frame i is lens[i] bytes),
 * frame i on queue port[i] of the nq queues `qs`. A frame for a queue that is full (after
 * moving its waiting frames to the front) or out of range is not queued. Returns how
 * many were queued. */
unsigned mrc_sendq_add_run(struct mrc_sendq *qs, unsigned nq, const uint8_t *data,
                           const uint32_t *lens, const uint16_t *port, unsigned n);

/* mrc_sendq_add_run of one frame, `len` bytes at `frame`, by scalars (no arrays for the
 * caller to build: an answer's ACK queued behind its data, SendQueue.add_behind): 1 if
 * it was queued on queue `port`, 0 if that queue is full or out of range. */
unsigned mrc_sendq_add_one(struct mrc_sendq *qs, unsigned nq, const uint8_t *frame,
                           uint32_t len, uint16_t port);

/* mrc_sendq_add_run of a run mrc_patch_run_gather wrote into `data`: frame i is lens[i]
 * bytes there (plens[i] = 0), or its headers there (lens[i] bytes less the ICRC's 4),
 * then plens[i] bytes of payload at payload + i * seg (the sender's buffer: it must stay
 * mapped until the frame has gone), then the ICRC (the last 4 of the lens[i]). */
unsigned mrc_sendq_add_gather(struct mrc_sendq *qs, unsigned nq, const uint8_t *data,
                              const uint32_t *lens, const uint32_t *plens,
                              const uint8_t *payload, size_t seg, const uint16_t *port,
                              unsigned n);

/* Drop the k oldest frames of q (all if k is larger); returns how many went. */
unsigned mrc_sendq_drop(struct mrc_sendq *q, unsigned k);
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

/* Send queue q's frames on fd (a bound packet socket) with sendmmsg, b->max at a time
 * through b's message headers, until the queue is empty or the socket takes no more.
 * Returns the frames sent; *err gets 0 (queue empty), EAGAIN (the socket is full: the
 * rest waits) or the errno of a frame that failed at the head of the queue (left there:
 * the caller decides); *calls gets the sendmmsg calls made. */
unsigned mrc_sendq_send(int fd, struct mrc_batch *b, struct mrc_sendq *q, int *err,
                        unsigned *calls);

/* Bit i set for each of the nq (at most 32) queues qs[i] with frames waiting. */
uint32_t mrc_sendq_busy(const struct mrc_sendq *qs, unsigned nq);

/* marks[i] = the frames waiting on queue i, for each of the nq queues. */
void mrc_sendq_mark(const struct mrc_sendq *qs, unsigned nq, uint32_t *marks);

/* Bit i set for each of the nq (at most 32) queues with more frames waiting than
 * marks[i] (mrc_sendq_mark's): the ports a run since went to. */
uint32_t mrc_sendq_grown(const struct mrc_sendq *qs, unsigned nq, const uint32_t *marks);

/* mrc_sendq_send of every one of the nq (at most 32) queues with frames waiting, on port
 * i's socket fds[i] through its batch bs[i] (fd < 0: a closed port, skipped): first the
 * queues whose bit is set in `first`, then the others, each in index order. For each
 * queue sent, sent[i], calls[i] and errs[i] get what mrc_sendq_send gave; *total the
 * frames sent in all. Returns the queues sent as bits (one call for mrcd's pass, where
 * it was a check and a send per port). */
uint32_t mrc_sendq_flush(struct mrc_sendq *qs, unsigned nq, const int *fds,
                         struct mrc_batch *const *bs, uint32_t first, unsigned *sent,
                         unsigned *calls, int *errs, unsigned *total);
/* cffi: end */

/* sendmmsg of the n messages b->msgs[0..n-1] already set up: how many went (partial
 * when the socket is full), or -errno if the first one failed. */
int mrc_send_prepared(int fd, struct mrc_batch *b, unsigned n);

#endif
