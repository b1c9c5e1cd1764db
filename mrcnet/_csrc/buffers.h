/* mrcnet C: frame memory shared by the core and the ports, with no system call
 * (buffers.c): a batch's message headers and slots (struct mrc_batch). mrcnet/buffers.py
 * binds it; the system calls that fill and drain it are batch.c's (mrcnet/io/batch.py). */
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

/* cffi: end */

#endif
