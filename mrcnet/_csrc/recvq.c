/* mrcnet C: a QP's posted receives (see recvq.h). */
#include "recvq.h"

#include <stdlib.h>

#define RECVQ_FIRST 16  /* slots of a new queue (most QPs post a few receives at a time) */

struct mrc_recvq *mrc_recvq_new(void)
{
    struct mrc_recvq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->wr = malloc(sizeof *q->wr * RECVQ_FIRST);
    if (!q->wr) {
        free(q);
        return NULL;
    }
    q->cap = RECVQ_FIRST;
    return q;
}

void mrc_recvq_free(struct mrc_recvq *q)
{
    if (q) {
        free(q->wr);
        free(q);
    }
}

int mrc_recvq_push(struct mrc_recvq *q, uint64_t wr_id)
{
    if (q->n == q->cap) {  /* full: twice the slots, the entries from slot 0 */
        if (q->cap > UINT32_MAX / 2)
            return -1;
        uint64_t *wr = malloc(sizeof *wr * q->cap * 2);
        if (!wr)
            return -1;
        for (uint32_t i = 0; i < q->n; i++)
            wr[i] = q->wr[(q->head + i) & (q->cap - 1)];
        free(q->wr);
        q->wr = wr;
        q->head = 0;
        q->cap *= 2;
    }
    q->wr[(q->head + q->n) & (q->cap - 1)] = wr_id;
    q->n++;
    return 0;
}

uint64_t mrc_recvq_pop(struct mrc_recvq *q)
{
    if (!q->n)
        return 0;
    uint64_t v = q->wr[q->head];
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
    return v;
}

uint64_t mrc_recvq_at(const struct mrc_recvq *q, uint32_t i)
{
    return q->wr[(q->head + i) & (q->cap - 1)];
}
