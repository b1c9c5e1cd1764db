/* Batch memory. See buffers.h for the contract. */
#include "buffers.h"

#include <string.h>

void mrc_batch_init(struct mrc_batch *b)
{
    memset(b->msgs, 0, sizeof(*b->msgs) * b->max);
    for (unsigned i = 0; i < b->max; i++) {
        b->msgs[i].msg_hdr.msg_iov = &b->iov[i];
        b->msgs[i].msg_hdr.msg_iovlen = 1;
    }
}
