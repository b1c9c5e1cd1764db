/* The sender's SACK decisions, their common case: see sackrec.h. Each part names the
 * Python it repeats (mrcnet/core/recovery.py Recovery._sack_news, on_sack_records and
 * _rtt_sample; mrcnet/core/evs.py EVInfo.rtt_sample; mrcnet/core/tailloss.py
 * _path_srtt), operation for operation, so the doubles come out the same to the bit. */
#include "sackrec.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define EV_PATH_SHIFT 12       /* EV >> 12: plane and path (constants.EV_PATH_SHIFT) */
#define SACK_ALWAYS_SKIP 2     /* SETH M: ALWAYS_SKIP (constants.SackMode) */
#define OP_WRITE_LAST 0xc8     /* constants.Opcode: a message's end ... */
#define OP_WRITE_LAST_IMM 0xc9
#define OP_WRITE_ONLY 0xca
#define OP_WRITE_ONLY_IMM 0xcb /* ... (the AckReq ones: constants.LAST_OPCODES) */
#define RTT_ALPHA 0.125        /* evs.RTT_ALPHA (and Recovery._rtt_sample's) */
#define RTT_BETA 0.25          /* evs.RTT_BETA */
#define REO_DECAY_BYTES (4 << 20)  /* recovery.REO_DECAY_BYTES */
#define REO_DECAY_RTTS 32      /* recovery.REO_DECAY_RTTS */
#define ACK_INTS 10            /* rxlane.h MRC_RX_ACK_INTS */
#define REO_SCALED_CAP_RTTS 2  /* recovery.REO_SCALED_CAP_RTTS */

/* Python's max(a, b): the first unless the second is strictly larger; min likewise. */
static inline double pymax(double a, double b) { return b > a ? b : a; }
static inline double pymin(double a, double b) { return b < a ? b : a; }

struct mrc_evtab *mrc_evtab_new(void)
{
    return calloc(1, sizeof(struct mrc_evtab));
}

void mrc_evtab_free(struct mrc_evtab *t)
{
    if (t)
        free(t->e);
    free(t);
}

int32_t mrc_evtab_add(struct mrc_evtab *t, uint32_t ev)
{
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 16;
        struct mrc_ev *e = realloc(t->e, cap * sizeof *e);
        if (!e)
            return -1;
        t->e = e;
        t->cap = cap;
    }
    struct mrc_ev *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    e->ev = ev;
    return (int32_t)t->n++;
}

static struct mrc_ev *find(const struct mrc_evtab *t, uint32_t ev)  /* evm.evs.get */
{
    for (uint32_t k = 0; k < t->n; k++)
        if (t->e[k].ev == ev)
            return &t->e[k];
    return 0;
}

/* EVInfo.rtt_sample and Recovery._rtt_sample: RFC 6298 (the same steps, the same
 * order; only the constants' spelling differs: RTT_BETA is 0.25, RTT_ALPHA 0.125). */
static inline void rtt_fold(double *srtt, double *rttvar, double *min_rtt, double rtt)
{
    if (*srtt == 0.0) {
        *srtt = rtt;
        *rttvar = rtt / 2;
        *min_rtt = rtt;
        return;
    }
    *rttvar += RTT_BETA * (fabs(*srtt - rtt) - *rttvar);
    *srtt += RTT_ALPHA * (rtt - *srtt);
    *min_rtt = pymin(*min_rtt, rtt);
}

double mrc_evtab_path_srtt(const struct mrc_evtab *t, uint32_t ev)
{
    const struct mrc_ev *e = find(t, ev);
    if (e && e->srtt != 0.0)
        return e->srtt;
    uint32_t key = ev >> EV_PATH_SHIFT;
    double best = 0.0;
    int any = 0;
    for (uint32_t k = 0; k < t->n; k++)
        if (t->e[k].ev >> EV_PATH_SHIFT == key) {
            best = any ? pymax(best, t->e[k].srtt) : t->e[k].srtt;
            any = 1;
        }
    return best;
}

uint32_t mrc_evtab_paths(const struct mrc_evtab *t, uint32_t *keys, double *srtts,
                         uint32_t cap)
{
    uint32_t m = 0;
    for (uint32_t k = 0; k < t->n; k++) {
        double r = t->e[k].srtt;
        if (r == 0.0)
            continue;  /* (a path none of whose EVs is measured is not listed) */
        uint32_t key = t->e[k].ev >> EV_PATH_SHIFT, j;
        for (j = 0; j < m && keys[j] != key; j++)
            ;
        if (j < m) {
            if (r > srtts[j])
                srtts[j] = r;
        } else if (m < cap && r > 0.0) {
            keys[m] = key;
            srtts[m++] = r;
        }
    }
    return m;
}

uint32_t mrc_sack_records(struct mrc_snd *s, const struct mrc_evtab *t, struct mrc_nscc *cc,
                          const int64_t *rec, const double *sent, uint32_t i, uint32_t n,
                          double now, int64_t una, int64_t retries, int64_t reo_scale,
                          int64_t reo_clean, double reo_learned, double reo_last,
                          struct mrc_sack_out *o)
{
    uint32_t flags = 0;
    o->stale = 0;
    o->nskip = 0;
    o->acked = 0;
    for (; i < n; i++) {
        const int64_t *r = rec + (size_t)i * ACK_INTS;
        int64_t cack = r[0], acked = r[1], tx = r[2], trig = r[5];
        uint32_t sack_ev = (uint32_t)r[3];
        int ece = r[6] != 0;
        int64_t mode = r[7], penalty = r[8];
        struct mrc_ev *e = find(t, sack_ev);
        /* not the common case: Python's (a retired EV's news, the receiver's
         * ALWAYS_SKIP, the end of a silence) */
        if ((e && e->bad) || (!ece && mode == SACK_ALWAYS_SKIP) || (acked && retries))
            break;
        /* on_sack_records */
        if (cack < una) {
            o->stale++;
            flags |= MRC_SACK_STALE;
        }
        if (cack > una)
            una = cack;
        /* _sack_news (no "declared lost" record: the caller checked) */
        double rtt = 0.0;
        int has_rtt = 0;
        if (tx) {
            double ts = sent[i];
            rtt = now - ts;
            if (ts > s->tie_sent || (ts == s->tie_sent && trig > s->tie_seq)) {
                s->tie_sent = ts;
                s->tie_seq = trig;
            }
            if (e)
                rtt_fold(&e->srtt, &e->rttvar, &e->min_rtt, rtt);
            rtt_fold(&s->srtt, &s->rttvar, &s->min_rtt, rtt);
            has_rtt = 1;
        }
        if (e) {
            e->acked++;
            if (ece)
                e->ecn++;
        }
        if (ece) {
            o->skip[o->nskip++] = sack_ev;  /* evm.skip(sack_ev, "ecn"), by the caller */
            flags |= MRC_SACK_SKIP;
        }
        if (mrc_nscc_on_ack(cc, acked, rtt, has_rtt, ece, now)) {
            flags |= MRC_SACK_OOM;  /* (this record half made, as NSCC.on_ack's error leaves it) */
            break;
        }
        if (penalty)
            mrc_nscc_on_penalty(cc, (int32_t)penalty, now);
        /* (sack_acked, sack_pending and tlp_sent: the caller's, from o->acked) */
        o->acked += acked;
        if (acked)
            flags |= MRC_SACK_ACKED;
        if (acked && (reo_scale > 1 || reo_learned != 0.0)) {
            flags |= MRC_SACK_REO;
            reo_clean += acked;
            if (reo_clean >= REO_DECAY_BYTES && now - reo_last >= REO_DECAY_RTTS * s->srtt) {
                if (reo_scale > 1)
                    reo_scale = reo_scale / 2 > 1 ? reo_scale / 2 : 1;
                reo_learned /= 2;
                reo_clean = 0;
            }
        }
        s->handled++;
    }
    o->una = una;
    o->reo_scale = reo_scale;
    o->reo_clean = reo_clean;
    o->reo_learned = reo_learned;
    return i | flags;
}

double mrc_sack_rto(const struct mrc_snd *s, const struct mrc_evtab *t, uint32_t ev,
                    double ack_timeout, double floor)
{
    const struct mrc_ev *e = find(t, ev);
    double base;
    if (e && e->srtt != 0.0)
        base = e->srtt + 4 * pymax(e->rttvar, s->rttvar);
    else if (s->srtt != 0.0)
        base = s->srtt + 4 * s->rttvar;
    else
        base = ack_timeout;
    return pymax(floor, base);
}

/* The largest srtt of any EV (max(srtts.values()) in _detect_tied: the slowest path). */
static double slowest(const struct mrc_evtab *t)
{
    double best = 0.0;
    for (uint32_t k = 0; k < t->n; k++)
        if (t->e[k].srtt > best)
            best = t->e[k].srtt;
    return best;
}

uint32_t mrc_rack_tied(const struct mrc_txq *q, const struct mrc_evtab *t, double limit,
                       int64_t tie_seq, double wait, double now, uint64_t *lost,
                       uint32_t cap, double *at)
{
    double allowance = wait - q->rack_rtt;
    uint32_t m = 0;
    for (int32_t i = q->head; i >= 0 && m < cap; i = q->pk[i].next) {
        const struct mrc_txpkt *p = &q->pk[i];
        if (p->sent != limit || (int64_t)p->seq >= tie_seq)
            break;
        double rtt = mrc_evtab_path_srtt(t, p->ev);
        if (rtt == 0.0) {
            if (mrc_tx_path_acked(q, p->ev >> EV_PATH_SHIFT) < 0)
                continue;  /* a path never heard from: how slow it is nobody knows */
            rtt = slowest(t);
            if (rtt == 0.0)
                continue;
        }
        double due = limit + pymax(wait, rtt + allowance);
        if (due > now) {
            *at = pymin(*at, due);
            continue;
        }
        lost[m++] = p->seq;
    }
    return m;
}

/* Recovery._reorder_allowance (rack_floor, hold: HostConfig's as mrc_sack_after says) */
static double allowance(const struct mrc_snd *s, double rack_floor, double hold,
                        int64_t reo_scale, double reo_learned)
{
    double floor = pymax(rack_floor, s->min_rtt / 4);
    double base = floor * (double)reo_scale;
    if (reo_scale > 1 && s->srtt != 0.0)
        base = pymin(base, pymax(floor, REO_SCALED_CAP_RTTS * s->srtt));
    return pymax(base, reo_learned) + hold;
}

/* TailLoss._prompt_end: a retransmission or a message's end (WRITE_LAST / WRITE_ONLY;
 * with an immediate too when prompt is 2: the peer holds no ACK for an answer) */
static int prompt_end(const struct mrc_txpkt *p, int prompt)
{
    return p->tx > 1 || p->opcode == OP_WRITE_LAST || p->opcode == OP_WRITE_ONLY ||
           (prompt > 1 && (p->opcode == OP_WRITE_LAST_IMM || p->opcode == OP_WRITE_ONLY_IMM));
}

int mrc_sack_after(const struct mrc_snd *s, const struct mrc_evtab *t, const struct mrc_txq *q,
                   const struct mrc_sack_cfg *k, double now, int64_t acked, int rtx,
                   int64_t reo_scale, double reo_learned, double backoff, int tlp_sent,
                   uint64_t *lost, uint32_t cap, struct mrc_sack_timers *o)
{
    /* _detect_losses */
    double rack_at = o->rack_at, limit = q->rack_sent;
    if (limit >= 0) {
        double wait = q->rack_rtt + allowance(s, k->rack_floor, k->hold, reo_scale,
                                              reo_learned);
        if (mrc_tx_rack(q, limit, wait, now, lost, cap, &rack_at))
            return 1;
        if (rack_at == INFINITY && s->tie_sent == limit && q->ninfl && k->tie_break &&
            mrc_rack_tied(q, t, limit, s->tie_seq, wait, now, lost, cap, &rack_at))
            return 1;
    }
    o->rack_at = rack_at;
    if (acked) {
        /* _arm_rto: the oldest packet in flight */
        if (q->head >= 0) {
            const struct mrc_txpkt *p = &q->pk[q->head];
            o->rto_at = p->sent + mrc_sack_rto(s, t, p->ev, k->ack_timeout,
                                               k->timeout_floor) * backoff;
        } else {
            o->rto_at = INFINITY;
        }
        if (q->ninfl || rtx) {
            if (k->tail_probe && !tlp_sent) {  /* arm_tlp: pto from now, unless the
                                                    timeout comes first */
                double hold = k->tlp_hold;
                if (k->prompt && q->tail >= 0 && prompt_end(&q->pk[q->tail], k->prompt))
                    hold = 0.0;  /* (TailLoss.pto: reported at once, no hold) */
                double at = now + (k->tlp_srtts * (s->srtt != 0.0 ? s->srtt : k->base_rtt_hint)
                                   + hold);
                o->tlp_at = at < o->rto_at ? at : INFINITY;
            }
        } else {
            o->tlp_at = INFINITY;
        }
    } else if (!q->ninfl && !rtx) {
        o->rto_at = o->tlp_at = INFINITY;
    }
    return 0;
}

int mrc_sack_trim(struct mrc_txq *q, const struct mrc_evtab *t, struct mrc_nscc *cc,
                  int64_t seq, uint32_t ev)
{
    if (seq < 0)
        return -1;
    const struct mrc_txpkt *p = &q->pk[(uint64_t)seq & q->mask];
    if (!(p->flags & MRC_TX_LIVE) || p->seq != (uint64_t)seq || p->ev != ev)
        return -1;  /* rx_nack_stale */
    cc->qa_pending = 1;  /* NSCC.on_trim */
    if (p->flags & MRC_TX_PEND)
        return 0;
    mrc_tx_lose(q, seq);  /* _mark_lost(seq, now, "trim") */
    struct mrc_ev *e = find(t, ev);
    if (e)
        e->trimmed++;
    return 1;
}
