/* The requester's table of packets in flight: see txtable.h. */
#include "txtable.h"

#include <math.h>

/* The entry of ``seq`` if the ring holds it (a slot is reused a window later). */
static struct mrc_txpkt *entry(const struct mrc_txq *t, int64_t seq)
{
    struct mrc_txpkt *p = &t->pk[(uint64_t)seq & t->mask];
    return (p->flags & MRC_TX_LIVE) && p->seq == (uint64_t)seq ? p : 0;
}

static void link_tail(struct mrc_txq *t, struct mrc_txpkt *p, int32_t i)
{
    p->prev = t->tail;
    p->next = -1;
    if (t->tail >= 0)
        t->pk[t->tail].next = i;
    else
        t->head = i;
    t->tail = i;
    p->flags |= MRC_TX_INFL;
    t->ninfl++;
    t->infl_bytes += p->len;
}

static void unlink_pkt(struct mrc_txq *t, struct mrc_txpkt *p)
{
    if (!(p->flags & MRC_TX_INFL))
        return;
    if (p->prev >= 0)
        t->pk[p->prev].next = p->next;
    else
        t->head = p->next;
    if (p->next >= 0)
        t->pk[p->next].prev = p->prev;
    else
        t->tail = p->prev;
    p->prev = p->next = -1;
    p->flags &= ~MRC_TX_INFL;
    t->ninfl--;
    t->infl_bytes -= p->len;
}

/* The slot of path ``key``: its own, else the empty one where it would go (NULL: the
 * table is full, which its size rules out). */
static struct mrc_txpath *path_slot(const struct mrc_txq *t, uint32_t key)
{
    uint32_t i = (key * 2654435761u) & t->pmask;
    for (uint32_t n = 0; n <= t->pmask; n++, i = (i + 1) & t->pmask) {
        struct mrc_txpath *e = &t->paths[i];
        if (e->key == key || e->key == MRC_TX_NO_PATH)
            return e;
    }
    return 0;
}

double mrc_tx_path_acked(const struct mrc_txq *t, uint32_t key)
{
    const struct mrc_txpath *e = path_slot(t, key);
    return e && e->key == key ? e->acked : -1.0;
}

void mrc_tx_init(struct mrc_txq *t, uint64_t seq)
{
    for (uint32_t i = 0; i <= t->pmask; i++)
        t->paths[i].key = MRC_TX_NO_PATH;
    t->head = t->tail = -1;
    t->ninfl = 0;
    t->infl_bytes = 0;
    t->rack_sent = -1.0;
    t->rack_rtt = 0.0;
    t->seen_base = seq;
    t->seen_bm = 0;
}

/* A new packet ``seq``: its entry filled, at the end of the flight order. */
static void put_new(struct mrc_txq *t, uint64_t seq, uint32_t ev, uint8_t op, uint32_t off,
                    uint32_t len, uint32_t wr, double now, uint16_t ts)
{
    int32_t i = (int32_t)(seq & t->mask);
    struct mrc_txpkt *p = &t->pk[i];
    p->seq = seq;
    p->ev = ev;
    p->opcode = op;
    p->off = off;
    p->len = len;
    p->wr = wr;
    p->sent = now;
    p->ts = ts;
    p->tx = 1;
    p->flags = MRC_TX_LIVE;
    link_tail(t, p, i);
}

void mrc_tx_send(struct mrc_txq *t, uint64_t seq0, unsigned n, const uint32_t *ev,
                 const uint8_t *op, uint32_t wr, uint32_t off0, uint32_t seg,
                 uint32_t total, double now, uint16_t ts)
{
    uint32_t off = off0;
    for (unsigned k = 0; k < n; k++, off += seg)
        put_new(t, seq0 + k, ev[k], op[k], off,
                total > off ? (total - off < seg ? total - off : seg) : 0, wr, now, ts);
    t->wr_unacked[wr & t->wr_mask] += (int32_t)n;
}

void mrc_tx_send_msgs(struct mrc_txq *t, uint64_t seq0, unsigned n, const uint32_t *ev,
                      const uint8_t *op, const uint32_t *wr, const uint32_t *len,
                      double now, uint16_t ts)
{
    for (unsigned k = 0; k < n; k++) {
        put_new(t, seq0 + k, ev[k], op[k], 0, len[k], wr[k], now, ts);
        t->wr_unacked[wr[k] & t->wr_mask] += 1;
    }
}

int mrc_tx_resend(struct mrc_txq *t, int64_t seq, uint32_t ev, double now, uint16_t ts)
{
    struct mrc_txpkt *p = entry(t, seq);
    if (!p)
        return 0;
    unlink_pkt(t, p);  /* (a resend of a packet still in flight moves it to the end) */
    p->ev = ev;
    p->sent = now;
    p->ts = ts;
    p->tx++;
    p->flags &= ~MRC_TX_PEND;
    link_tail(t, p, (int32_t)((uint64_t)seq & t->mask));
    return 1;
}

int mrc_tx_get(const struct mrc_txq *t, int64_t seq, int64_t *ints, double *sent)
{
    const struct mrc_txpkt *p = seq < 0 ? 0 : entry(t, seq);
    if (!p)
        return 0;
    ints[0] = p->ev;
    ints[1] = p->ts;
    ints[2] = p->tx;
    ints[3] = p->len;
    ints[4] = p->off;
    ints[5] = p->opcode;
    ints[6] = p->wr;
    ints[7] = p->flags;
    *sent = p->sent;
    return 1;
}

int mrc_tx_lose(struct mrc_txq *t, int64_t seq)
{
    struct mrc_txpkt *p = entry(t, seq);
    if (!p)
        return 0;
    unlink_pkt(t, p);
    p->flags |= MRC_TX_PEND;
    return 1;
}

/* ``p`` (of ``seq``) is acknowledged: the _acked bookkeeping of qp.py. */
static uint32_t acked(struct mrc_txq *t, struct mrc_txpkt *p, uint64_t seq, double now,
                      struct mrc_txsack *o)
{
    uint32_t key = p->ev >> 12, k;
    unlink_pkt(t, p);
    for (k = 0; k < o->npaths && o->path_key[k] != key; k++)
        ;
    if (k == o->npaths) {
        o->npaths++;
        o->path_key[k] = key;
        o->path_sent[k] = p->sent;
    } else if (p->sent > o->path_sent[k]) {
        o->path_sent[k] = p->sent;
    }
    struct mrc_txpath *e = path_slot(t, key);
    if (e) {
        if (e->key != key) {
            e->key = key;
            e->acked = p->sent;
        } else if (p->sent > e->acked) {
            e->acked = p->sent;
        }
    }
    if (p->flags & MRC_TX_LOGGED) {
        k = o->nspecial++;
        o->special_seq[k] = seq;
        o->special_sent[k] = p->sent;
        o->special_pend[k] = (p->flags & MRC_TX_PEND) != 0;
    }
    p->flags = 0;
    t->wr_unacked[p->wr & t->wr_mask]--;
    if (p->sent > t->rack_sent) {
        t->rack_sent = p->sent;
        t->rack_rtt = now - p->sent;
    }
    return p->len ? p->len : 1;
}

uint64_t mrc_tx_sack(struct mrc_txq *t, double now, int64_t snd_una, int64_t cack,
                     int64_t next_seq, int64_t base, uint64_t bm, int first,
                     int64_t trig, uint32_t ev, uint32_t ts, struct mrc_txsack *o)
{
    uint64_t total = 0;
    struct mrc_txpkt *p = entry(t, trig);
    o->npaths = o->nspecial = 0;
    o->trig_tx = 0;
    if (p && p->ev == ev && p->ts == ts && p->tx) {
        o->trig_tx = p->tx;
        o->trig_sent = p->sent;
    }
    for (int64_t s = snd_una; s < cack; s++) {
        p = entry(t, s);
        if (p)
            total += acked(t, p, (uint64_t)s, now, o);
    }
    if (!bm)
        return total;
    int64_t d = base - (int64_t)t->seen_base;
    if (d >= 0 && first) {
        int64_t room = next_seq - base;  /* bits past next_seq: ignored */
        if (room < 64)
            bm &= room > 0 ? ((uint64_t)1 << room) - 1 : 0;
        uint64_t seen = d < 64 ? t->seen_bm >> d : 0;
        t->seen_base = (uint64_t)base;
        t->seen_bm = bm | seen;
        bm &= ~seen;
    }
    while (bm) {
        int b = __builtin_ctzll(bm);
        int64_t s = base + b;
        bm &= bm - 1;
        if (s >= next_seq)
            break;
        p = entry(t, s);
        if (p)
            total += acked(t, p, (uint64_t)s, now, o);
    }
    return total;
}

unsigned mrc_tx_rack(const struct mrc_txq *t, double limit, double wait, double now,
                     uint64_t *lost, unsigned cap, double *at)
{
    unsigned n = 0;
    *at = INFINITY;
    for (int32_t i = t->head; i >= 0 && n < cap; i = t->pk[i].next) {
        const struct mrc_txpkt *p = &t->pk[i];
        if (p->sent >= limit)
            break;
        if (p->sent + wait <= now) {
            lost[n++] = p->seq;
        } else {
            *at = p->sent + wait;
            break;
        }
    }
    return n;
}

unsigned mrc_tx_inflight(const struct mrc_txq *t, uint64_t *out, unsigned cap)
{
    unsigned n = 0;
    for (int32_t i = t->head; i >= 0 && n < cap; i = t->pk[i].next)
        out[n++] = t->pk[i].seq;
    return n;
}

unsigned mrc_tx_prompt_scan(const struct mrc_txq *t, double limit, int tied,
                            uint64_t tie_seq, uint64_t una, const char *ends, double rtt,
                            double window, double now, double *at, uint64_t *out,
                            unsigned cap)
{
    unsigned n = 0;
    for (int32_t i = t->head; i >= 0 && n < cap; i = t->pk[i].next) {
        const struct mrc_txpkt *p = &t->pk[i];
        if (p->sent > limit || (p->sent == limit && (!tied || p->seq >= tie_seq)))
            break;
        int end = p->tx > 1 || ends[p->opcode];
        if (end && p->sent < limit) {
            double due = p->sent + rtt + window;
            if (due <= now) {
                *at = -1.0;  /* one is due: Python walks the flight itself */
                return 0;
            }
            if (due < *at)
                *at = due;
        } else if (end || p->seq == una) {
            out[n++] = p->seq;
        }
    }
    return n;
}

int mrc_tx_log(struct mrc_txq *t, int64_t seq, int on)
{
    struct mrc_txpkt *p = entry(t, seq);
    if (!p)
        return 0;
    if (on)
        p->flags |= MRC_TX_LOGGED;
    else
        p->flags &= ~MRC_TX_LOGGED;
    return 1;
}
