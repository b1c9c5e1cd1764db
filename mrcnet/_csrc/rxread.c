/* A port read straight into the receive lane. See rxread.h. */
#include "rxread.h"

int mrc_rx_recv(struct mrc_rx_ctx *c, int fd, struct mrc_batch *b, unsigned n,
                unsigned *nrecv)
{
    if (n > c->cap)
        n = c->cap;  /* every frame received must be one the lane can point at */
    int k = mrc_recv_batch(fd, b, n, 0, 1, nrecv);
    if (k > 0)
        mrc_rx_slots(c, b, (unsigned)k);
    return k;
}
