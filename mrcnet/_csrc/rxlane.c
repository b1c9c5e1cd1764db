/* The responder's receive lane: see rxlane.h. Each step below names the line of
 * QueuePair.on_data (mrcnet/core/qp.py) it repeats; mrcnet/core/rxlane.py repeats it in
 * Python. Protocol values are spelled out (a test checks them against mrcnet.constants). */
#include "rxlane.h"

#include "checksum.h"
#include "template.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PSN_MASK 0xffffffLL
#define PSN_HALF (1LL << 23)
#define SACK_BITMAP_BITS 64
#define ENDPOINT_QPN 0x2u
#define S16_MAX 32767
#define EV_PLANE_SHIFT 24
#define EV_PLANE_MASK 0x7f
#define EV_PATH_SHIFT 12
#define EV_PATH_MASK 0xfff
#define OUTER_DST (ETH_LEN + 24)  /* the outer IPv6 header's destination */
#define SACK_SKIP_ONCE 1        /* SETH M: SKIP_ONCE, the ECN echo */
#define SETH_PR 0x02
#define OOO_COUNT_MAX 0x7fff
#define RX_NO_TS 0x10000u       /* ack_ts of a packet without TSETH */
#define ETH_LEN 14
#define BTH_LEN 12
#define NETH_LEN 20
#define NACK_TRIMMED 0x01
#define NACK_TRIMMED_LASTHOP 0x02
#define CC_TYPE_NACK 2
#define WINDOW_PENALTY_MAX 127
#define PENALTY_PER_LASTHOP_TRIM 8
#define SETH_LEN 28
#define CC_LEN 8
#define RX_LATE_WINDOW 16e-3   /* s: how long a reported retransmission's stamp is compared
                                   (a quarter of the 16-bit microsecond stamp's wrap) */

enum {
    OP_WRITE_FIRST = 0xc6, OP_WRITE_MIDDLE = 0xc7, OP_WRITE_LAST = 0xc8,
    OP_WRITE_ONLY = 0xca, OP_WRITE_ONLY_IMM = 0xcb,
};
#define MSN_MASK 0xffffu  /* METH's RQMSN: 16 bits */

void mrc_rx_slots(struct mrc_rx_ctx *c, const struct mrc_batch *b, unsigned k)
{
    if (k > c->cap)
        k = c->cap;
    if (k > b->max)
        k = b->max;
    for (unsigned j = 0; j < k; j++) {
        uint32_t s = b->idx[j];
        uint32_t len = b->lens[s];
        c->ptr[j] = b->bufs + (size_t)s * b->bufsize;
        c->len[j] = len < b->bufsize ? len : b->bufsize;  /* recvmmsg reports a cut
                                                              frame's full length */
    }
}

static int alloc_ring(struct mrc_rx_qp *q, uint32_t cap)
{
    int64_t *seq = malloc(sizeof *seq * cap);
    uint32_t *len = malloc(sizeof *len * cap), *msn = malloc(sizeof *msn * cap);
    uint32_t *imm = malloc(sizeof *imm * cap);
    uint8_t *op = malloc(cap);
    if (!seq || !len || !msn || !imm || !op) {
        free(seq); free(len); free(msn); free(imm); free(op);
        return -1;
    }
    for (uint32_t i = 0; i < cap; i++)
        seq[i] = -1;
    q->ooo_seq = seq;
    q->ooo_len = len;
    q->ooo_msn = msn;
    q->ooo_imm = imm;
    q->ooo_op = op;
    q->ooo_cap = cap;
    return 0;
}

static void free_ring(struct mrc_rx_qp *q)
{
    free(q->ooo_seq); free(q->ooo_len); free(q->ooo_msn); free(q->ooo_imm); free(q->ooo_op);
}

struct mrc_rx_qp *mrc_rx_new(uint32_t cap)
{
    if (cap == 0 || (cap & (cap - 1)))
        return NULL;
    struct mrc_rx_qp *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    if (alloc_ring(q, cap)) {
        free(q);
        return NULL;
    }
    q->hole_at = q->ack_at = INFINITY;
    q->rtx_at = -INFINITY;
    q->ack_plane = -1;
    return q;
}

void mrc_rx_free(struct mrc_rx_qp *q)
{
    if (!q)
        return;
    free_ring(q);
    free(q);
}

int mrc_rx_grow(struct mrc_rx_qp *q, uint32_t cap)
{
    if (cap == 0 || (cap & (cap - 1)) || cap < q->ooo_n)
        return -1;
    struct mrc_rx_qp old = *q;
    if (alloc_ring(q, cap))
        return -1;
    for (uint32_t i = 0; i < old.ooo_cap; i++) {
        int64_t s = old.ooo_seq[i];
        if (s < 0)
            continue;
        uint32_t j = (uint32_t)s & (cap - 1);
        q->ooo_seq[j] = s;
        q->ooo_len[j] = old.ooo_len[i];
        q->ooo_msn[j] = old.ooo_msn[i];
        q->ooo_imm[j] = old.ooo_imm[i];
        q->ooo_op[j] = old.ooo_op[i];
    }
    free_ring(&old);
    return 0;
}

uint64_t mrc_rx_bitmap(const struct mrc_rx_qp *q, int64_t base)
{
    uint64_t bm = 0;
    if (!q->ooo_n)
        return 0;
    uint32_t mask = q->ooo_cap - 1;
    for (int i = 0; i < SACK_BITMAP_BITS; i++) {
        int64_t s = base + i;
        if (s >= 0 && q->ooo_seq[(uint32_t)s & mask] == s)
            bm |= 1ULL << i;
    }
    return bm;
}

static const struct mrc_rx_mr *find_mr(const struct mrc_rx_ctx *c, uint32_t rkey)
{
    for (uint32_t i = 0; i < c->nmrs; i++)
        if (c->mrs[i].rkey == rkey)
            return &c->mrs[i];
    return NULL;
}

/* Whether the frame's source address (16 bytes at src_off) is one of the npeers
 * addresses in `peers` (the data QP's, or the ack QP's). */
static int from_peer(const uint8_t *peers, uint32_t npeers, const uint8_t *buf,
                     uint32_t len, uint32_t src_off)
{
    if ((uint64_t)src_off + 16 > len)
        return 0;
    for (uint32_t i = 0; i < npeers && i < MRC_RX_PEERS_MAX; i++)
        if (!memcmp(buf + src_off, peers + 16 * i, 16))
            return 1;
    return 0;
}

/* How far a 24-bit PSN is from the unbounded sequence number `ref` (the nearest one:
 * -2^23 .. 2^23 - 1), as qp.py's unwrap() takes it. */
static inline int64_t psn_delta(uint32_t psn, int64_t ref)
{
    int64_t d = ((int64_t)psn - ref) & PSN_MASK;
    return d >= PSN_HALF ? d - (PSN_MASK + 1) : d;
}

/* _deliver() of a packet without an immediate: a message ends at LAST / ONLY. */
static inline void deliver_plain(struct mrc_rx_qp *q, uint32_t len, uint32_t op)
{
    q->rx_msg_bytes += len;
    if (op == OP_WRITE_LAST || op == OP_WRITE_ONLY)
        q->rx_msg_bytes = 0;
}

/* ack_late (Responder._late): whether a new packet was sent before something a SACK
 * already reported: a higher sequence number (first transmissions leave in sequence
 * order), or a retransmission whose stamp is newer (within RX_LATE_WINDOW of its
 * arrival, so the 16-bit stamps compare without wrapping). */
static inline int sent_before_reported(const struct mrc_rx_qp *q, int64_t seq, uint32_t ts,
                                       double now)
{
    if (seq < q->rep_high)
        return 1;
    uint32_t d = (q->rtx_ts - ts) & 0xffff;
    return ts != RX_NO_TS && now - q->rtx_at <= RX_LATE_WINDOW && d && d < 0x8000;
}

/* ... and a retransmission's stamp, kept if it is the newest (or the kept one is old). */
static inline void note_rtx(struct mrc_rx_qp *q, uint32_t ts, double now)
{
    if (ts == RX_NO_TS)
        return;
    if (now - q->rtx_at > RX_LATE_WINDOW || ((ts - q->rtx_ts) & 0xffff) < 0x8000) {
        q->rtx_ts = ts;
        q->rtx_at = now;
    }
}

static int lane_sack(struct mrc_rx_ctx *c, struct mrc_rx_qp *q);
static int lane_nack(struct mrc_rx_ctx *c, struct mrc_rx_qp *q, const struct mrc_parsed *f,
                     int64_t seq);

/* QueuePair.on_sack's table work for a SACK of the ack QP (see struct mrc_rx_ack): 1 if
 * taken (a record left), 0 if Python must see the frame. */
static int ack_take(struct mrc_rx_ack *a, const struct mrc_parsed *f, const uint8_t *buf,
                    uint32_t blen, double now)
{
    if (a->n >= a->max || !from_peer(a->peers, a->npeers, buf, blen, f->src_off))
        return 0;  /* (_ready_qp: rx_wrong_peer) */
    /* on_sack: unwrap the cumulative PSN against snd_una; the window */
    /* (a probe response answers no packet: Python's) */
    if (f->pr)
        return 0;
    int64_t una = a->una;
    /* SETH's CACK is the last PSN in order: the table's cumulative point is the next */
    int64_t cack = una + psn_delta((f->cack_psn + 1) & PSN_MASK, una);
    if (cack > a->next_seq || cack <= una - a->txcap)
        return 0;  /* rx_sack_out_of_window */
    int64_t trig = cack - 1 + f->ack_offset;
    /* forged.sack_verdict: bits or a trigger for PSNs never sent, an acknowledgement
     * sooner than a round trip (Python counts and drops them) */
    int64_t base = cack - 1 + f->sack_offset;
    if (f->bitmap && base + 63 - __builtin_clzll(f->bitmap) >= a->next_seq)
        return 0;  /* rx_sack_unsent */
    if (trig >= a->next_seq)
        return 0;  /* rx_sack_unsent */
    if (cack > una && a->early > 0.0) {
        const struct mrc_txpkt *p = &a->txq->pk[(uint64_t)(cack - 1) & a->txq->mask];
        if ((p->flags & MRC_TX_LIVE) && p->seq == (uint64_t)(cack - 1) && p->tx == 1 &&
            now - p->sent < a->early)
            return 0;  /* rx_sack_too_early */
    }
    uint64_t acked = mrc_tx_sack(a->txq, now, una, cack, a->next_seq,
                                 cack - 1 + f->sack_offset, f->bitmap, f->sack_offset == 2,
                                 trig, f->sack_ev, f->ts_echo, a->o);
    if (cack > una)
        a->una = cack;
    int64_t *r = a->rec + (size_t)a->n * MRC_RX_ACK_INTS;
    r[0] = cack;
    r[1] = (int64_t)acked;
    r[2] = a->o->trig_tx;
    r[3] = f->sack_ev;
    r[4] = f->ts_echo;
    r[5] = trig;
    r[6] = f->mode == SACK_SKIP_ONCE;
    r[7] = f->mode;
    r[8] = f->window_penalty;
    r[9] = f->rcvd_bytes;
    a->rec_sent[a->n++] = a->o->trig_tx ? a->o->trig_sent : 0.0;
    return 1;
}

#define RESULT(pos, r) ((int)((pos) << MRC_RX_POS_SHIFT | (c->nsout ? MRC_RX_SACKS : 0) | \
                                (c->ack && c->ack->n ? MRC_RX_ACKS : 0) | \
                                (c->imm_n ? MRC_RX_IMM : 0) | \
                                (c->ack_moved ? MRC_RX_ACKAT : 0) | (r)))
#define STOP(w) do { c->pos = k; c->why = (w); return RESULT(k, MRC_RX_STOP); } while (0)

/* The completion of the record just made (its message's `len` bytes and immediate
 * `imm`), written into the client's ring by the lane itself (struct mrc_rx_ctx's
 * imm_cq): only while every earlier record waiting was written too (imm_cq is cleared at
 * the first that is not), so that the client sees the QP's receives in order. */
static void imm_write(struct mrc_rx_ctx *c, uint32_t len, uint32_t imm)
{
    struct mrc_recvq *rq = c->imm_rq;
    struct mrc_shmring_tx *w = c->imm_cq;
    int r = 0;
    if (w->direct && rq->n && c->imm_written + 1 == c->imm_n)
        r = mrc_cq_put_recv_imm(w, c->qpn, mrc_recvq_at(rq, 0), len, imm);
    /* (a full ring disarmed it too: the doorbell is owed either way) rung now, as the
     * completion is published: the client wakes while mrcd finishes its pass */
    if (r > 0 && (r & 1)) {
        if (mrc_cq_ring(w))
            c->imm_bell = 1;
        else
            c->imm_rang = 1;  /* (not sent: mrcd's Python rings it) */
    }
    if (r >= 2) {
        mrc_recvq_pop(rq);
        c->imm_written++;
    } else {
        c->imm_cq = NULL;  /* this one and the rest: Python's */
    }
}

int mrc_rx_run(struct mrc_rx_ctx *c, unsigned i, unsigned n, double now, int32_t plane)
{
    c->plane = plane;
    c->ack_moved = 0;
    struct mrc_parsed *f = &c->parsed;
    struct mrc_rx_qp *q = c->qp;
    if (n > c->cap)
        n = c->cap;
    for (unsigned k = i; k < n; k++) {
        const uint8_t *buf = c->ptr[k];
        uint32_t blen = c->len[k];
        if (mrc_parse(buf, blen, f, c->verify))
            STOP(MRC_RX_WHY_PARSE);
        /* Host._lane_frame: a SACK (SETH, no data) of the ack QP */
        if (!f->is_data && f->has_seth && c->ack && f->dest_qp == c->ack->qpn &&
            f->dest_qp != ENDPOINT_QPN) {
            if (c->imm_n) {  /* its record after the completions': they go first */
                c->pos = k - 1;  /* (k > i: a completion of this run's) */
                c->why = MRC_RX_WHY_NONE;
                return RESULT(k - 1, MRC_RX_DONE);
            }
            if (ack_take(c->ack, f, buf, blen, now))
                continue;
            STOP(MRC_RX_WHY_ACK);
        }
        /* Host.receive_batch: data of the lane's QP (ready: the caller checked) */
        if (!q || !f->is_data || f->dest_qp != c->qpn || f->dest_qp == ENDPOINT_QPN)
            STOP(MRC_RX_WHY_OTHER);
        if (!from_peer(c->peers, c->npeers, buf, blen, f->src_off))
            STOP(MRC_RX_WHY_PEER);
        /* on_data: unwrap the PSN against rcv_nxt, window */
        int64_t rcv = q->rcv_nxt;
        int64_t d = psn_delta(f->psn, rcv);
        int64_t seq = rcv + d;
        if (d >= c->win || d <= -c->win)
            STOP(MRC_RX_WHY_WINDOW);
        /* rkey and bounds */
        uint32_t len = f->length;
        const struct mrc_rx_mr *mr = find_mr(c, f->rkey);
        if (!mr)
            STOP(MRC_RX_WHY_MR_MISS);
        if (!mr->remote_write || f->va < mr->addr || f->va - mr->addr > mr->length ||
            len > mr->length - (f->va - mr->addr))
            STOP(MRC_RX_WHY_MR_BAD);
        uint64_t off = f->va - mr->addr;
        uint32_t mask = q->ooo_cap - 1;
        if (d < 0 || (q->ooo_n && q->ooo_seq[(uint32_t)seq & mask] == seq))
            STOP(MRC_RX_WHY_DUP);
        if (f->trimmed) {
            if (lane_nack(c, q, f, seq))
                continue;  /* NACKed here, exactly as on_data would */
            STOP(MRC_RX_WHY_TRIMMED);
        }
        uint32_t op = f->opcode;
        /* A write-with-immediate only in on_data's common case (the ctx's imm_* fields):
         * in order with nothing out of order (it completes now, nothing else does), the
         * MSN expected (no rx_msn_mismatch) and a receive posted for it (no NACK) */
        int imm = 0;
        if (f->has_imm || (op != OP_WRITE_FIRST && op != OP_WRITE_MIDDLE &&
                           op != OP_WRITE_LAST && op != OP_WRITE_ONLY)) {
            imm = op == OP_WRITE_ONLY_IMM && f->has_imm && d == 0 && !q->ooo_n &&
                  c->imm_credit && f->rqmsn == c->imm_msn && c->imm_n < c->imm_max;
            if (!imm)
                STOP(MRC_RX_WHY_IMM);
        }
        /* (without a TSETH the answer may be an ACK: Python decides) */
        if (!f->has_tseth)
            STOP(MRC_RX_WHY_IMM);
        if ((uint64_t)d >= q->ooo_cap || q->unrep_n >= MRC_RX_UNREP_MAX)
            STOP(MRC_RX_WHY_FULL);
        if (d == 0 && q->ooo_nimm)
            STOP(MRC_RX_WHY_DELIVER);
        if (len) {
            if (f->payload_len != len || (uint64_t)f->payload_off + len > blen)
                STOP(MRC_RX_WHY_SHORT);
            memcpy(mr->base + off, buf + f->payload_off, len);
        }
        /* From here on the packet is accepted: the state moves exactly as in on_data. */
        c->placed++;
        q->rcvd_bytes += len;
        int ce = f->ce != 0;
        int ack_req = f->ack_req != 0;
        uint32_t flags = 0;
        if (imm && ack_req && c->ack_with_data) {
            /* (in order, nothing missing: the imm test) a message the application may
             * answer: while this QP answers, the ACK waits to leave with the answer */
            if (c->pingpong) {
                ack_req = 0;
                flags = MRC_RX_IMM_HELD;
            } else {
                flags = MRC_RX_IMM_ALONE;
            }
        }
        int defer = ack_req && c->ack_req_burst;  /* answered at the burst's end */
        int now_sack = (ack_req && !defer) || ce || f->rtx ||
                       (d != 0 && c->sack_on_reorder);
        if (c->ack_late) {
            if (f->rtx)
                note_rtx(q, f->timestamp, now);
            else if (sent_before_reported(q, seq, f->timestamp, now)) {
                if (c->ack_req_burst)
                    defer = 1;
                else
                    now_sack = 1;
            }
        }
        int64_t ilen = 0;
        if (d == 0) {
            if (imm) {  /* _deliver: the message's bytes, the credit and the MSN */
                ilen = q->rx_msg_bytes + len;
                q->rx_msg_bytes = 0;
                c->imm_msn = (c->imm_msn + 1) & MSN_MASK;
                c->imm_credit--;
            } else {
                deliver_plain(q, len, op);
            }
            int64_t nxt = seq + 1;
            if (q->ooo_n) {
                int late_end = 0;  /* a message whose end came first completes now */
                for (;;) {
                    uint32_t j = (uint32_t)nxt & mask;
                    if (q->ooo_seq[j] != nxt)
                        break;
                    q->ooo_seq[j] = -1;
                    q->ooo_n--;
                    late_end |= q->ooo_op[j] == OP_WRITE_LAST || q->ooo_op[j] == OP_WRITE_ONLY;
                    deliver_plain(q, q->ooo_len[j], q->ooo_op[j]);
                    nxt++;
                }
                if (late_end && c->ack_gap_fill) {
                    if (c->ack_req_burst)
                        defer = 1;
                    else
                        now_sack = 1;
                }
                if (q->hole_old) {
                    now_sack = 1;
                    q->hole_old = 0;
                }
                q->hole_at = q->ooo_n ? now : INFINITY;
            }
            q->rcv_nxt = nxt;
        } else {
            uint32_t j = (uint32_t)seq & mask;
            q->ooo_seq[j] = seq;
            q->ooo_len[j] = len;
            q->ooo_op[j] = (uint8_t)op;
            q->ooo_msn[j] = 0;
            q->ooo_imm[j] = 0;
            q->ooo_n++;
            if (seq > q->rx_high)
                q->rx_high = seq;
            if (isinf(q->hole_at)) {
                q->hole_at = now;
            } else if (!q->hole_old && now - q->hole_at >= c->reorder_floor &&
                       !c->sack_on_reorder) {
                q->hole_old = 1;
                now_sack = 1;
            }
        }
        q->unrep[q->unrep_n++] = seq;
        int64_t since = ++q->since_ack;
        q->ack_seq = seq;
        q->ack_ev = f->ev;
        q->ack_ts = f->timestamp;
        q->ack_ce = ce;
        q->ack_plane = c->plane;
        int r = MRC_RX_DONE;
        if (now_sack || since >= (int64_t)c->ack_every ||
            q->unrep[0] < seq - (int64_t)c->ack_span) {
            if (!c->sack_ok || !lane_sack(c, q))
                r = MRC_RX_SACK;  /* Python builds it */
            else if (!imm)
                continue;  /* built here, exactly as send_sack would */
            else
                flags |= MRC_RX_IMM_SACKED;
        } else if (defer) {
            if (q->ack_at > now) {
                q->ack_at = now;  /* due: the burst's end sends it */
                c->ack_moved = 1;
            }
        } else if (isinf(q->ack_at)) {
            q->ack_at = now + c->ack_delay;
            c->ack_moved = 1;
        }
        if (imm) {
            int64_t *rec = c->imm_rec + (size_t)c->imm_n++ * MRC_RX_IMM_INTS;
            rec[0] = ilen;
            rec[1] = f->imm;
            rec[2] = flags;
            if (c->imm_cq)
                imm_write(c, (uint32_t)ilen, f->imm);
        }
        if (r == MRC_RX_SACK || (imm && c->imm_n >= c->imm_max)) {
            c->pos = k;
            c->why = MRC_RX_WHY_NONE;
            return RESULT(k, r);
        }
    }
    c->pos = n;
    c->why = MRC_RX_WHY_NONE;
    return RESULT(n, MRC_RX_END);
}

void mrc_rx_imm_set(struct mrc_rx_ctx *c, uint32_t msn, uint32_t credit, int32_t pingpong,
                    int32_t ack_with_data, struct mrc_recvq *rq, struct mrc_shmring_tx *cq)
{
    c->imm_msn = msn & MSN_MASK;
    c->imm_credit = credit;
    c->pingpong = pingpong;
    c->ack_with_data = ack_with_data;
    c->imm_rq = rq;
    c->imm_cq = rq ? cq : NULL;
}

void mrc_rx_ack_sync(struct mrc_rx_ctx *c, struct mrc_rx_ack *a, int64_t una,
                     int64_t next_seq, double early)
{
    if (!a->txq)
        return;
    a->una = una;
    a->next_seq = next_seq;
    a->early = early;
    c->ack = a;
}

uint32_t mrc_rx_ack_take(struct mrc_rx_ack *a)
{
    uint32_t n = a->n;
    a->n = 0;
    return n;
}

uint32_t mrc_rx_imm_take(struct mrc_rx_ctx *c)
{
    uint32_t r = c->imm_n | c->imm_written << MRC_RX_IMM_WRITTEN_SHIFT |
                 (c->imm_rang ? MRC_RX_IMM_RANG : 0) | (c->imm_bell ? MRC_RX_IMM_BELL : 0);
    c->imm_n = c->imm_written = c->imm_rang = c->imm_bell = 0;
    return r;
}

int mrc_rx_one(struct mrc_rx_ctx *c, const uint8_t *buf, uint32_t len, double now,
               int32_t plane)
{
    if (!c->cap)
        return mrc_rx_run(c, 0, 0, now, plane);
    c->ptr[0] = buf;
    c->len[0] = len;
    int r = mrc_rx_run(c, 0, 1, now, plane);
    c->ptr[0] = NULL;
    c->len[0] = 0;
    return r;
}

static inline void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v & 0xffff);
}

int mrc_rx_sack(struct mrc_rx_qp *q, const struct mrc_rx_sackt *t, uint8_t *out,
                uint32_t cap, uint32_t ev, uint32_t penalty, int32_t probe,
                const int64_t *bases, uint32_t nbases)
{
    uint32_t len = t->len;
    if (len > MRC_RX_SACK_MAX || (uint64_t)t->cc_off + CC_LEN > len ||
        (uint64_t)t->seth_off + SETH_LEN > t->cc_off || t->udp_off + 8 > len ||
        ETH_LEN + 4 > len)
        return 0;
    int64_t rcv = q->rcv_nxt;
    /* send_sack: the window bases */
    int64_t own[MRC_RX_UNREP_MAX + 1];
    if (!nbases) {
        int64_t far = rcv + SACK_BITMAP_BITS;
        own[0] = rcv + 1;
        nbases = 1;
        if (q->rx_high > far) {  /* else nothing received lately lies beyond `far` */
            int64_t ext[MRC_RX_UNREP_MAX];
            uint32_t ne = 0, nu = q->unrep_n < MRC_RX_UNREP_MAX ? q->unrep_n
                                                                 : MRC_RX_UNREP_MAX;
            for (uint32_t i = 0; i < nu; i++) {
                int64_t s = q->unrep[i];
                if (s <= far)
                    continue;
                uint32_t j = ne++;  /* insertion sort: a handful at most */
                while (j && ext[j - 1] > s) {
                    ext[j] = ext[j - 1];
                    j--;
                }
                ext[j] = s;
            }
            for (uint32_t i = 0; i < ne; i++)
                if (ext[i] >= own[nbases - 1] + SACK_BITMAP_BITS)
                    own[nbases++] = ext[i];
        }
        bases = own;
    }
    if ((uint64_t)nbases * len > cap)
        return 0;
    q->unrep_n = 0;
    q->rep_high = q->rx_high > rcv - 1 ? q->rx_high : rcv - 1;  /* (all received so far) */
    /* SETH: CACK is the last PSN in order; offsets are from it */
    int64_t cack = rcv - 1;
    int64_t off = q->ack_seq - cack;
    int32_t ack_off = off > S16_MAX ? S16_MAX : off < -S16_MAX ? -S16_MAX : (int32_t)off;
    if (probe >= 0)
        ack_off = (int16_t)probe;  /* a probe response carries the probe id there */
    uint32_t nooo = q->ooo_n > OOO_COUNT_MAX ? OOO_COUNT_MAX : q->ooo_n;
    uint32_t fl = mrc_ev_flow(ev);
    uint32_t b1 = (q->ack_ce ? SACK_SKIP_ONCE << 5 : 0) | (probe >= 0 ? SETH_PR : 0);
    for (uint32_t b = 0; b < nbases; b++) {
        uint8_t *f = out + (size_t)b * len;
        memcpy(f, t->frame, len);
        put16(f + ETH_LEN + 2, fl);
        if (t->has_ip)
            put16(f + t->icrc_from + 2, fl);
        put16(f + t->udp_off, mrc_ev_sport(ev));
        uint8_t *p = f + t->seth_off;  /* SPDCID, DPDCID, CC type/flags, MPR: template's */
        int64_t so = bases[b] - cack;
        p[1] = (uint8_t)b1;
        put16(p + 2, (uint16_t)(int16_t)ack_off);
        put32(p + 4, q->ack_ev);
        put32(p + 12, (uint32_t)(cack & PSN_MASK));
        put16(p + 18, (uint16_t)(int16_t)(so > S16_MAX ? S16_MAX : so));
        uint64_t bm = mrc_rx_bitmap(q, bases[b]);
        put32(p + 20, (uint32_t)(bm >> 32));
        put32(p + 24, (uint32_t)bm);
        p = f + t->cc_off;
        put16(p, q->ack_ts & 0xffff);
        put16(p + 2, nooo);
        put32(p + 4, ((penalty & 0x7f) << 24) | ((uint32_t)((uint64_t)q->rcvd_bytes >> 8) & 0xffffff));
        mrc_finish_frame(f, len, t->icrc_from, (int)t->has_ip, t->udp_off, t->pseudo_sum);
    }
    return (int)nbases;
}

/* QueuePair.send_sack for the lane's QP when nothing but the record decides: the
 * triggering packet's path is usable (_reverse's first case), the QP has a template for
 * it, and the output has room. 0: not done (nothing changed), the caller's Python does
 * it. */
static int lane_sack(struct mrc_rx_ctx *c, struct mrc_rx_qp *q)
{
    uint32_t ev = q->ack_ev, plane = (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK;
    if (!ev || plane >= 64 || !(c->plane_ok >> plane & 1))
        return 0;
    uint32_t key = ev >> EV_PATH_SHIFT;
    const struct mrc_rx_path *p = NULL;
    for (uint32_t i = 0; i < c->npaths; i++)
        if (c->paths[i].key == key) {
            p = &c->paths[i];
            break;
        }
    const struct mrc_rx_sackt *t = p ? p->t : NULL;
    uint32_t port = p ? p->port : 0;
    struct mrc_rx_sackt along;  /* the plane's template along this path's route */
    if (!p) {
        const struct mrc_rx_plane *pl = c->planes[plane];
        uint32_t r = pl && pl->nroutes ? (key & EV_PATH_MASK) % pl->nroutes : 0;
        if (!pl || !pl->t || pl->win != c->win || r >= MRC_RX_PLANE_ROUTES || !pl->ok[r] ||
            pl->t->len < OUTER_DST + 16)
            return 0;
        along = *pl->t;
        memcpy(along.frame + OUTER_DST, pl->dst + 16 * r, 16);
        t = &along;
        port = pl->port;
    }
    if (!t || c->nsout >= c->sout_max)
        return 0;
    uint32_t len = t->len;
    uint32_t room = (c->sout_max - c->nsout) * len;
    if (c->sout_cap - c->sout_len < room)
        room = c->sout_cap - c->sout_len;
    double pen = q->penalty;
    uint32_t penalty = pen != 0 ? (uint32_t)pen : 0;  /* int(): truncation, pen >= 0 */
    int n = mrc_rx_sack(q, t, c->sout + c->sout_len, room, ev, penalty, -1, NULL, 0);
    if (n <= 0)
        return 0;
    if (pen != 0)
        q->penalty = pen * 0.5;
    if (q->ack_at != INFINITY)
        c->ack_moved = 1;
    q->ack_at = INFINITY;
    q->since_ack = 0;
    for (int i = 0; i < n; i++) {
        c->sport[c->nsout] = port;
        c->slen[c->nsout++] = len;
    }
    c->sout_len += (uint32_t)n * len;
    return 1;
}

/* Responder.on_data for a trimmed packet of the lane's QP (_trim_reason, then _nack's
 * first case: back on the packet's own path, usable and with routes), when the packet's
 * plane has a NACK template serving its path's route (struct mrc_rx_plane) and the
 * output has room: the NACK NackTemplate.build makes, counted in nnack / nnack_last for
 * the caller. 0: not done (nothing changed), the caller's Python does it. */
static int lane_nack(struct mrc_rx_ctx *c, struct mrc_rx_qp *q, const struct mrc_parsed *f,
                     int64_t seq)
{
    uint32_t ev = f->ev, plane = (ev >> EV_PLANE_SHIFT) & EV_PLANE_MASK;
    if (!c->sack_ok || !ev || plane >= 64 || !(c->plane_ok >> plane & 1))
        return 0;
    const struct mrc_rx_plane *pl = c->planes[plane];
    if (!pl || !pl->nt || !pl->nroutes)
        return 0;
    uint32_t r = ((ev >> EV_PATH_SHIFT) & EV_PATH_MASK) % pl->nroutes;
    const struct mrc_rx_nackt *t = pl->nt;
    uint32_t len = t->len;
    if (r >= MRC_RX_PLANE_ROUTES || !pl->ok[r] || len < OUTER_DST + 16 ||
        len > MRC_RX_SACK_MAX || (uint64_t)t->neth_off + NETH_LEN > len ||
        t->udp_off + 8 + BTH_LEN > len || c->nsout >= c->sout_max ||
        c->sout_cap - c->sout_len < len)
        return 0;
    int last = f->trim_lasthop != 0;
    if (last) {  /* _trim_reason: the window penalty asks the senders to back off */
        double pen = q->penalty + PENALTY_PER_LASTHOP_TRIM;
        q->penalty = pen < WINDOW_PENALTY_MAX ? pen : WINDOW_PENALTY_MAX;
    }
    uint8_t *o = c->sout + c->sout_len;
    memcpy(o, t->frame, len);
    memcpy(o + OUTER_DST, pl->dst + 16 * r, 16);
    uint32_t fl = mrc_ev_flow(ev);
    put16(o + ETH_LEN + 2, fl);
    if (t->has_ip)
        put16(o + t->icrc_from + 2, fl);
    put16(o + t->udp_off, mrc_ev_sport(ev));
    uint32_t psn = (uint32_t)(seq & PSN_MASK);
    uint8_t *b = o + t->udp_off + 8 + BTH_LEN - 3;  /* BTH.PSN */
    b[0] = (uint8_t)(psn >> 16);
    put16(b + 1, psn & 0xffff);
    uint8_t *n = o + t->neth_off;  /* SPDCID, DPDCID: the template's */
    put16(n, 0);
    n[2] = last ? NACK_TRIMMED_LASTHOP : NACK_TRIMMED;
    n[3] = 0;
    put32(n + 4, ev);
    put32(n + 12, psn);
    n[16] = CC_TYPE_NACK << 4;
    n[17] = 0;
    put16(n + 18, f->has_tseth ? f->timestamp & 0xffff : 0);
    mrc_finish_frame(o, len, t->icrc_from, (int)t->has_ip, t->udp_off, t->pseudo_sum);
    c->sport[c->nsout] = pl->port;
    c->slen[c->nsout++] = len;
    c->sout_len += len;
    c->nnack++;
    c->nnack_last += (uint32_t)last;
    return 1;
}

uint64_t mrc_rx_take(struct mrc_rx_ctx *c)
{
    uint64_t r = (uint64_t)c->sout_len | (uint64_t)c->nsout << 32 |
                 (uint64_t)c->nnack << 42 | (uint64_t)c->nnack_last << 52;
    c->sout_len = c->nsout = c->nnack = c->nnack_last = 0;
    return r;
}
