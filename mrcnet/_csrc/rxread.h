/* mrcnet C: a port read straight into the receive lane (rxread.c).
 *
 * mrcd's receive loop (mrcnet/daemon/engine.py Daemon._read_ports) reads each port's
 * socket into the port's C batch and hands the frames to the lane (rxlane.h) where they
 * lie: one C call per read instead of the receive wrapper's, the batch's and the lane
 * loader's Python frames (mrcnet/core/receive.py Receiver.port_reader). */
#ifndef MRCNET_RXREAD_H
#define MRCNET_RXREAD_H

#include "batch.h"
#include "rxlane.h"

/* cffi: begin */
/* recvmmsg of what the socket `fd` holds into batch `b` (at most n frames, and no more
 * than the lane's `cap`: mrc_recv_batch, outgoing frames skipped, without waiting), then
 * the lane's frames 0..k-1 pointed at the k kept ones (mrc_rx_slots). Returns k (0:
 * nothing queued), or -errno; *nrecv: the frames taken from the socket. */
int mrc_rx_recv(struct mrc_rx_ctx *c, int fd, struct mrc_batch *b, unsigned n,
                unsigned *nrecv);
/* cffi: end */

#endif
