/* Batched packet socket I/O. See batch.h for the contract of each function. */
#include "batch.h"

#include <errno.h>
#include <string.h>

int mrc_send_prepared(int fd, struct mrc_batch *b, unsigned n)
{
    unsigned done = 0;
    while (done < n) {
        int r = sendmmsg(fd, b->msgs + done, n - done, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                return (int)done;  /* queue full: the caller retries the rest later */
            return done ? (int)done : -errno;
        }
        if (r == 0)
            break;
        done += (unsigned)r;
    }
    return (int)done;
}

int mrc_send_batch(int fd, struct mrc_batch *b, const uint8_t *data, unsigned n)
{
    size_t off = 0;
    if (n > b->max)
        n = b->max;
    for (unsigned i = 0; i < n; i++) {
        b->iov[i].iov_base = (void *)(data + off);
        b->iov[i].iov_len = b->lens[i];
        b->msgs[i].msg_hdr.msg_iov = &b->iov[i];  /* (a send queue's points elsewhere) */
        b->msgs[i].msg_hdr.msg_iovlen = 1;
        b->msgs[i].msg_hdr.msg_name = NULL;  /* the socket is bound to its port */
        b->msgs[i].msg_hdr.msg_namelen = 0;
        off += b->lens[i];
    }
    return mrc_send_prepared(fd, b, n);
}

int mrc_send_slots(int fd, struct mrc_batch *b, unsigned n)
{
    if (n > b->max)
        n = b->max;
    for (unsigned i = 0; i < n; i++) {
        b->iov[i].iov_base = b->bufs + (size_t)i * b->bufsize;
        b->iov[i].iov_len = b->lens[i];
        b->msgs[i].msg_hdr.msg_iov = &b->iov[i];
        b->msgs[i].msg_hdr.msg_iovlen = 1;
        b->msgs[i].msg_hdr.msg_name = NULL;
        b->msgs[i].msg_hdr.msg_namelen = 0;
    }
    return mrc_send_prepared(fd, b, n);
}

int mrc_recv_batch(int fd, struct mrc_batch *b, unsigned n, int wait, int skip_outgoing,
                   unsigned *nrecv)
{
    if (n > b->max)
        n = b->max;
    for (unsigned i = 0; i < n; i++) {
        /* recvmmsg overwrites these; reset so every slot gets the full buffer again. */
        b->iov[i].iov_base = b->bufs + (size_t)i * b->bufsize;
        b->iov[i].iov_len = b->bufsize;
        b->msgs[i].msg_hdr.msg_iov = &b->iov[i];
        b->msgs[i].msg_hdr.msg_iovlen = 1;
        b->msgs[i].msg_hdr.msg_name = &b->addrs[i];
        b->msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_ll);
        b->msgs[i].msg_hdr.msg_flags = 0;
    }
    int r;
    do {
        /* With `wait`, block for the first frame only, then take what is queued. */
        r = recvmmsg(fd, b->msgs, n, wait ? MSG_WAITFORONE : MSG_DONTWAIT, NULL);
    } while (r < 0 && errno == EINTR);
    *nrecv = 0;
    if (r < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    *nrecv = (unsigned)r;
    unsigned k = 0;
    for (unsigned i = 0; i < (unsigned)r; i++) {
        uint8_t pt = b->addrs[i].sll_pkttype;
        b->lens[i] = b->msgs[i].msg_len;
        b->pkttype[i] = pt;
        b->ifindex[i] = b->addrs[i].sll_ifindex;
        if (skip_outgoing && pt == PACKET_OUTGOING)
            continue;
        b->idx[k++] = i;
    }
    return (int)k;
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
            /* the message takes the frame's iovecs where they lie in the queue */
            uint32_t j = q->head + i;
            b->msgs[i].msg_hdr.msg_iov = &q->iov[(size_t)MRC_SENDQ_IOV * j];
            b->msgs[i].msg_hdr.msg_iovlen = q->niov[j];
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

static int make_room(struct mrc_sendq *q)
{
    if (q->n < q->cap)
        return 1;
    if (!q->head)
        return 0;
    memmove(q->iov, q->iov + (size_t)MRC_SENDQ_IOV * q->head,
            sizeof *q->iov * MRC_SENDQ_IOV * (q->n - q->head));
    memmove(q->niov, q->niov + q->head, q->n - q->head);
    q->n -= q->head;
    q->head = 0;
    return 1;
}

/* The iovecs of a new frame of `niov` of them at the end of queue `port` (of nq), or
 * NULL when that queue is full or out of range. */
static struct iovec *add_frame(struct mrc_sendq *qs, unsigned nq, uint16_t port,
                               uint8_t niov)
{
    if (port >= nq)
        return NULL;
    struct mrc_sendq *q = &qs[port];
    if (!make_room(q))
        return NULL;
    q->niov[q->n] = niov;
    return &q->iov[(size_t)MRC_SENDQ_IOV * q->n++];
}

unsigned mrc_sendq_add_one(struct mrc_sendq *qs, unsigned nq, const uint8_t *frame,
                           uint32_t len, uint16_t port)
{
    struct iovec *v = add_frame(qs, nq, port, 1);
    if (!v)
        return 0;
    v->iov_base = (void *)frame;
    v->iov_len = len;
    return 1;
}

unsigned mrc_sendq_add_gather(struct mrc_sendq *qs, unsigned nq, const uint8_t *data,
                              const uint32_t *lens, const uint32_t *plens,
                              const uint8_t *payload, size_t seg, const uint16_t *port,
                              unsigned n)
{
    unsigned queued = 0;
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *frame = data + off;
        off += lens[i];
        if (!plens[i] || lens[i] < 4) {
            queued += mrc_sendq_add_one(qs, nq, frame, lens[i], port[i]);
            continue;
        }
        struct iovec *v = add_frame(qs, nq, port[i], 3);
        if (!v)
            continue;
        v[0].iov_base = (void *)frame;
        v[0].iov_len = lens[i] - 4;
        v[1].iov_base = (void *)(payload + (size_t)i * seg);
        v[1].iov_len = plens[i];
        v[2].iov_base = (void *)(frame + lens[i] - 4);
        v[2].iov_len = 4;
        queued++;
    }
    return queued;
}

unsigned mrc_sendq_add_run(struct mrc_sendq *qs, unsigned nq, const uint8_t *data,
                           const uint32_t *lens, const uint16_t *port, unsigned n)
{
    unsigned queued = 0;
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
        queued += mrc_sendq_add_one(qs, nq, data + off, lens[i], port[i]);
        off += lens[i];
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

uint32_t mrc_sendq_busy(const struct mrc_sendq *qs, unsigned nq)
{
    uint32_t busy = 0;
    for (unsigned i = 0; i < nq && i < 32; i++)
        if (qs[i].head < qs[i].n)
            busy |= 1u << i;
    return busy;
}

uint32_t mrc_sendq_flush(struct mrc_sendq *qs, unsigned nq, const int *fds,
                         struct mrc_batch *const *bs, uint32_t first, unsigned *sent,
                         unsigned *calls, int *errs, unsigned *total)
{
    uint32_t done = 0;
    *total = 0;
    /* Two rounds: the queues asked for first (their data goes before what was queued
     * behind it on the other ports), then the rest. */
    for (int round = 0; round < 2; round++) {
        for (unsigned i = 0; i < nq && i < 32; i++) {
            uint32_t bit = 1u << i;
            if (((first & bit) != 0) != (round == 0))
                continue;
            if (qs[i].head >= qs[i].n || fds[i] < 0 || !bs[i])
                continue;
            sent[i] = mrc_sendq_send(fds[i], bs[i], &qs[i], &errs[i], &calls[i]);
            *total += sent[i];
            done |= bit;
        }
    }
    return done;
}

void mrc_sendq_mark(const struct mrc_sendq *qs, unsigned nq, uint32_t *marks)
{
    for (unsigned i = 0; i < nq; i++)
        marks[i] = qs[i].n - qs[i].head;
}

uint32_t mrc_sendq_grown(const struct mrc_sendq *qs, unsigned nq, const uint32_t *marks)
{
    uint32_t grown = 0;
    for (unsigned i = 0; i < nq && i < 32; i++)
        if (qs[i].n - qs[i].head > marks[i])
            grown |= 1u << i;
    return grown;
}
