/* The ports' send queues: see sendq.h. */
#include "sendq.h"

#include <errno.h>
#include <string.h>

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

unsigned mrc_sendq_send(int fd, struct mrc_batch *b, struct mrc_sendq *q, int *err,
                        unsigned *calls)
{
    unsigned sent = 0;
    *err = 0;
    *calls = 0;
    while (q->head < q->n) {
        unsigned k = q->n - q->head;
        if (k > b->max)
            k = b->max;
        for (unsigned i = 0; i < k; i++) {
            b->iov[i] = q->iov[q->head + i];
            b->msgs[i].msg_hdr.msg_name = NULL;  /* the socket is bound to its port */
            b->msgs[i].msg_hdr.msg_namelen = 0;
        }
        int r = mrc_send_prepared(fd, b, k);
        (*calls)++;
        if (r < 0) {
            *err = -r;
            return sent;
        }
        q->head += (uint32_t)r;
        sent += (unsigned)r;
        if ((unsigned)r < k) {
            *err = EAGAIN;
            break;
        }
    }
    if (q->head == q->n)
        q->head = q->n = 0;
    return sent;
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
