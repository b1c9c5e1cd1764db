/* mrcnet C: frame memory shared by the core and the ports, with no system call
 * (buffers.c): a batch's message headers and slots (struct mrc_batch), and the ports'
 * send queues (struct mrc_sendq). mrcnet/buffers.py binds them; the system calls that
 * fill and drain them are batch.c's (mrcnet/io/batch.py).
 *
 * The send queues: mrcd's data frames go from the run that built them to sendmmsg with no
 * Python object per frame. mrc_patch_run (template.h) writes a run's frames back to back
 * into one buffer; mrc_sendq_add_run queues a pointer to each frame on its port's queue;
 * mrc_sendq_send (batch.h) sends a port's queue through the port's batch headers straight
 * from those buffers and keeps what the socket did not take. The buffers belong to Python
 * (mrcnet.buffers.SendQueue), which keeps them alive until their frames are gone. */
#ifndef MRCNET_BUFFERS_H
#define MRCNET_BUFFERS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* struct mmsghdr */
#endif
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/if_packet.h>

/* cffi: begin */
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

/* Drop the k oldest frames of q (all if k is larger); returns how many went. */
unsigned mrc_sendq_drop(struct mrc_sendq *q, unsigned k);
/* cffi: end */

#endif
