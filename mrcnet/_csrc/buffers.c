/* Batch memory and the ports' send queues. See buffers.h for the contract of each
 * function. */
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

static int make_room(struct mrc_sendq *q)
{
    if (q->n < q->cap)
        return 1;
    if (!q->head)
        return 0;
    memmove(q->iov, q->iov + q->head, sizeof *q->iov * (q->n - q->head));
    q->n -= q->head;
    q->head = 0;
    return 1;
}

unsigned mrc_sendq_add_run(struct mrc_sendq *qs, unsigned nq, const uint8_t *data,
                           const uint32_t *lens, const uint16_t *port, unsigned n)
{
    unsigned queued = 0;
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t len = lens[i];
        if (port[i] < nq) {
            struct mrc_sendq *q = &qs[port[i]];
            if (make_room(q)) {
                q->iov[q->n].iov_base = (void *)(data + off);
                q->iov[q->n].iov_len = len;
                q->n++;
                queued++;
            }
        }
        off += len;
    }
    return queued;
}

unsigned mrc_sendq_drop(struct mrc_sendq *q, unsigned k)
{
    unsigned have = q->n - q->head;
    if (k > have)
        k = have;
    q->head += k;
    if (q->head == q->n)
        q->head = q->n = 0;
    return k;
}
