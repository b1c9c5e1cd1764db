/* mrcnet C: the responder's receive lane (rxlane.c).
 *
 * Like TCP header prediction: the common case of receiving data (a data frame of the QP
 * the lane is set to, from its peer, in the receive window, new, untrimmed, without an
 * immediate, for a registered region that allows remote writes and holds the range;
 * and a single-packet write-with-immediate in order: struct mrc_rx_ctx's imm_* fields)
 * is parsed, placed and accounted for in C, one call per run of a receive batch.
 * Anything else stops the lane and goes through the Python core (mrcnet/core/qp.py
 * QueuePair.on_data and the host's dispatch), which reads and writes the very same
 * state: the responder's fields live in struct mrc_rx_qp for both. The lane stops too
 * when a SACK is due, so the SACK is built by Python at the point on_data would build
 * it. mrcnet/core/rxlane.py is the pure-Python twin; the tests compare the frames both
 * send with the frame-by-frame path's. */
#ifndef MRCNET_RXLANE_H
#define MRCNET_RXLANE_H

#include "buffers.h"
#include "parsed.h"
#include "recvq.h"
#include "shmqueues.h"
#include "txtable.h"

/* cffi: begin */
#define MRC_RX_UNREP_MAX 64  /* PSNs received since the last SACK kept here (Python keeps
                                any beyond: the lane stops when this is full) */
#define MRC_RX_PEERS_MAX 8   /* peer addresses the lane checks a frame's source against */

/* The responder half of a QP: every field the receive path reads or writes. Sequence
 * numbers are the core's unbounded ones (the 24-bit PSN unwrapped); times in seconds. */
struct mrc_rx_qp {
    int64_t  rcv_nxt;        /* cumulative point: next sequence number expected */
    int64_t  rx_high;        /* highest sequence number received out of order */
    int64_t  rx_msg_bytes;   /* bytes of the message being received, up to rcv_nxt */
    int64_t  rcvd_bytes;     /* payload bytes accepted (for the SACK's rcvd_bytes) */
    int64_t  since_ack;      /* data packets since the last SACK */
    double   hole_at;        /* since when a hole is at the cumulative point (inf: none) */
    double   ack_at;         /* delayed-SACK deadline (inf: none) */
    int32_t  hole_old;       /* that hole outlived the reorder allowance */
    int32_t  ack_ce;         /* the last packet to SACK: CE mark, plane, EV, stamp, seq */
    int32_t  ack_plane;
    uint32_t ack_ev, ack_ts;
    int64_t  ack_seq;
    double   penalty;        /* receiver window penalty (last-hop trims), halved per SACK */
    /* ack_late (HostConfig): what the SACKs sent so far reported that was sent last */
    int64_t  rep_high;       /* the highest sequence number a SACK reported */
    uint32_t rtx_ts;         /* the send stamp of the newest retransmission reported, */
    double   rtx_at;         /* ... and when it arrived (-inf: none) */
    uint32_t unrep_n;        /* packets received since the last SACK ... */
    int64_t  unrep[MRC_RX_UNREP_MAX];  /* ... the first MRC_RX_UNREP_MAX of them */
    /* out-of-order set: a ring indexed by seq & (ooo_cap - 1); slot i holds seq
     * ooo_seq[i] (-1: empty) with its payload length, opcode, MSN and immediate */
    uint32_t ooo_cap, ooo_n, ooo_nimm;  /* capacity (a power of 2), entries, immediates */
    int64_t  *ooo_seq;
    uint32_t *ooo_len, *ooo_msn, *ooo_imm;
    uint8_t  *ooo_op;
};

/* A memory region the lane may write: rkey, virtual address range, where it is. */
struct mrc_rx_mr {
    uint64_t addr, length;
    uint8_t *base;
    uint32_t rkey, remote_write;
};

/* A path the lane may send SACKs on: EV >> 12 (plane and path), its local port, and
 * the SACK template (struct mrc_rx_sackt, below). */
struct mrc_rx_sackt;
struct mrc_rx_path {
    uint32_t key, port;
    const struct mrc_rx_sackt *t;
};

/* A plane's SACK routes, for the paths of the plane the QP has no template for yet
 * (a responder answers on the triggering packet's path, and a QP that sprays over all of
 * them would otherwise make a template per path, in Python, for about every SACK):
 * `t` is the QP's first SACK template on the plane, and route r of the plane (path
 * index % nroutes, as QueuePair.route picks it) differs from t's route only in its outer
 * destination, dst[r], when ok[r] is 1 (plain uSID routes, both encapsulated, the same
 * MACs, hop limit and addresses: the ICRC and the checksum's pseudo-header cover the
 * inner header only). A SACK on such a path is t's with dst[r] put in: the bytes
 * SackTemplate.for_route makes. `win`: the receive window t was made for (its MPR). */
#define MRC_RX_PLANE_ROUTES 64
struct mrc_rx_nackt;
struct mrc_rx_plane {
    const struct mrc_rx_sackt *t;
    const struct mrc_rx_nackt *nt;  /* the QP's NACK template along a route of the plane
                                       t's routes serve as well (NULL: none yet) */
    uint32_t port, nroutes;
    int64_t  win;
    uint8_t  ok[MRC_RX_PLANE_ROUTES];
    uint8_t  dst[MRC_RX_PLANE_ROUTES * 16];
};

/* Why the lane stopped at a frame (mrc_rx_ctx.why), for the caller and the tests. */
#define MRC_RX_WHY_NONE     0
#define MRC_RX_WHY_PARSE    1   /* malformed: parsed.reason says why */
#define MRC_RX_WHY_OTHER    2   /* not a data frame, another QP, or no QP set */
#define MRC_RX_WHY_PEER     3   /* source is not the QP's peer */
#define MRC_RX_WHY_WINDOW   4   /* PSN outside the receive window */
#define MRC_RX_WHY_MR_MISS  5   /* rkey not (yet) in the lane's region table */
#define MRC_RX_WHY_MR_BAD   6   /* no remote write, or out of bounds */
#define MRC_RX_WHY_DUP      7
#define MRC_RX_WHY_TRIMMED  8
#define MRC_RX_WHY_IMM      9   /* carries an immediate, or its opcode is not plain */
#define MRC_RX_WHY_FULL    10   /* ring slot beyond capacity, or unrep[] full */
#define MRC_RX_WHY_DELIVER 11   /* in order with an immediate waiting in the ring */
#define MRC_RX_WHY_SHORT   12   /* payload not all inside the frame */
#define MRC_RX_WHY_ACK     13   /* a SACK of the ack QP the lane does not take (source,
                                   window, or no room for its record) */

/* mrc_rx_run() results: the low 2 bits of its return value (pos is the rest, from bit
 * MRC_RX_POS_SHIFT); bit 2 (MRC_RX_SACKS) says SACK frames the lane built are waiting
 * (nsout), bit 3 (MRC_RX_ACKS) that records of SACKs it took are (ack->n), bit 4
 * (MRC_RX_IMM) that records of writes-with-immediate it completed are (imm_n), bit 5
 * (MRC_RX_ACKAT) that it moved its QP's delayed-SACK deadline (ack_at) since the run
 * began, so that the caller need not read the field back after every run. */
#define MRC_RX_END   0  /* every frame handled */
#define MRC_RX_SACK  1  /* frame `pos` handled, and a SACK is due now */
#define MRC_RX_STOP  2  /* frame `pos` not handled: parsed holds it (why: MRC_RX_WHY_*) */
#define MRC_RX_DONE  3  /* frame `pos` handled, nothing due: returned for the completions
                           (their records full, or a SACK record would follow them) */
#define MRC_RX_SACKS 4
#define MRC_RX_ACKS  8
#define MRC_RX_IMM   16
#define MRC_RX_ACKAT 32  /* the run moved its QP's ack_at (the caller's timer version) */
#define MRC_RX_POS_SHIFT 6
/* imm_flags: the held-ACK decision Responder.on_data takes for an AckReq (ack_with_data),
 * and whether the lane sent the SACK the frame made due (Responder.send_sack's reset of
 * `held`) */
#define MRC_RX_IMM_HELD   1  /* ping-pong: the ACK waits for the answer (held, ack_held) */
#define MRC_RX_IMM_ALONE  2  /* not a ping-pong: acknowledged at once (alone_at = now) */
#define MRC_RX_IMM_SACKED 4  /* the lane built the SACK this frame made due */
#define MRC_RX_IMM_INTS   3  /* integers per completion record (imm_rec): one array, so
                                 that Python takes a run's records in one call */

/* The requester half of one QP whose SACKs the lane takes (like TCP's ACK prediction):
 * a SACK for it, from its peer, with a cumulative point in the send window, goes to its
 * table of packets in flight (mrc_tx_sack, the work QueuePair.on_sack hands the table)
 * and leaves a record; the caller's Python then makes on_sack's decisions from each
 * record, in order (QueuePair.on_sack_records), before anything else. Set only while the
 * QP is ready to send and keeps no "declared lost" records and no suspect paths: then
 * nothing a decision does changes what a later SACK's table work would do. */
#define MRC_RX_ACK_INTS 10  /* integers per record: cumulative point (unwrapped), bytes
                               acknowledged, the triggering packet's transmissions (0: no
                               match), the SACK's EV, stamp echo, triggering sequence
                               number, ECE (M = SKIP_ONCE), M, window penalty, received
                               bytes (CC_STATE units) */
struct mrc_rx_ack {
    struct mrc_txq *txq;       /* the QP's table */
    struct mrc_txsack *o;      /* where mrc_tx_sack reports (its arrays sized for it) */
    uint32_t qpn, npeers;
    uint8_t  peers[MRC_RX_PEERS_MAX * 16];
    int64_t  una;              /* snd_una: moves with each SACK taken */
    int64_t  next_seq, txcap;  /* the window: cack in (una - txcap, next_seq] */
    double   early;            /* a first transmission acknowledged sooner: forged (0: off) */
    int64_t  *rec;             /* records: MRC_RX_ACK_INTS integers each ... */
    double   *rec_sent;        /* ... and the triggering packet's send time */
    uint32_t n, max;           /* records waiting, room */
};

/* One host's lane: the frames of the batch, the QP it serves, the region table. */
struct mrc_rx_ctx {
    struct mrc_parsed parsed;  /* the frame the lane stopped at (MRC_RX_STOP) */
    const uint8_t **ptr;       /* frame i: ptr[i][0 : len[i]] */
    uint32_t *len;
    uint32_t cap;              /* slots in ptr / len */
    struct mrc_rx_qp *qp;      /* NULL: no QP, every data frame stops */
    uint32_t qpn;
    uint32_t npeers;
    uint8_t  peers[MRC_RX_PEERS_MAX * 16];
    int64_t  win;              /* receive window (PSNs either side of rcv_nxt) */
    uint32_t ack_every;
    uint32_t ack_span;         /* SACK once a PSN lies more than this past the first
                                  unreported one (HostConfig.ack_span) */
    int32_t  sack_on_reorder;
    int32_t  ack_req_burst;    /* an AckReq waits for its burst's end (HostConfig) */
    int32_t  ack_gap_fill;     /* a message completed by a gap's filling: SACK (HostConfig) */
    int32_t  ack_late;         /* a packet sent before one reported: SACK (HostConfig) */
    double   ack_delay, reorder_floor;
    int32_t  plane;            /* the receiving port's plane (the last run's) */
    int32_t  verify;           /* MRC_VERIFY_* for mrc_parse */
    struct mrc_rx_mr *mrs;
    uint32_t nmrs;
    uint32_t pos, why;         /* where and why the last run stopped */
    uint32_t ack_moved;        /* the run moved qp->ack_at (MRC_RX_ACKAT) */
    uint64_t placed;           /* data frames the lane handled, ever */
    /* SACKs the lane builds itself (QueuePair.send_sack's common case: back on the
     * triggering packet's path, whose plane is usable and has routes, with a template
     * the QP made); the caller takes them (nsout) before anything else goes out. */
    uint32_t sack_ok;          /* 0: every due SACK returns MRC_RX_SACK */
    uint64_t plane_ok;         /* bit p: plane p is usable and has paths */
    uint32_t credit;           /* unused (was the receive credit) */
    struct mrc_rx_path *paths;
    uint32_t npaths;
    uint8_t  *sout;            /* frames built, back to back ... */
    uint32_t sout_cap, sout_len;
    uint32_t *sport;           /* ... each one's port and length */
    uint32_t *slen;
    uint32_t nsout, sout_max;
    struct mrc_rx_ack *ack;    /* NULL: every SACK stops */
    /* the lane's QP's SACK routes by plane (NULL: none), for a path without a template */
    const struct mrc_rx_plane *planes[64];
    /* NACKs among the frames built (Responder._nack's for a trimmed packet, made here
     * when its path is usable and its plane has a NACK template): how many, and how
     * many of those TRIMMED_LASTHOP; the caller counts them when it takes the frames */
    uint32_t nnack, nnack_last;
    /* Write-with-immediate, Responder.on_data and _deliver's common case: a WRITE_ONLY_IMM
     * in order with nothing out of order, carrying the RQ MSN expected, for which a
     * receive is posted (imm_credit > 0), with a TSETH. It is placed, consumes the
     * credit, moves the MSN, and is acknowledged (held-ACK rules included) here, and
     * leaves a record (its message's bytes, immediate, MRC_RX_IMM_* flags) from which
     * the caller's Python pops the posted receive's wr_id and pushes the completion,
     * before anything else: a run returns before a SACK record would follow a
     * completion's (the two may go to one CQ, in the order the frames came), and at a
     * SACK it leaves to Python. mrc_rx_imm_set() gives the lane the responder's copy
     * before a run; imm_credit 0: every immediate stops (WHY_IMM). */
    int32_t  ack_with_data;    /* HostConfig.ack_with_data */
    int32_t  pingpong;         /* Responder.pingpong */
    uint32_t imm_msn;          /* the RQ MSN expected: Responder.imm_done's low 16 bits */
    uint32_t imm_credit;       /* immediates the lane may complete (posted receives left) */
    int64_t  *imm_rec;         /* the completions' records, MRC_RX_IMM_INTS integers
                                  each: message bytes, immediate, MRC_RX_IMM_* flags */
    uint32_t imm_n, imm_max;   /* records waiting, room */
    /* The completions themselves, straight into the client's ring (mrcd, docs/C-PASS.md
     * step 1): with imm_cq set (its `direct` on) the lane takes the posted receive's
     * wr_id from imm_rq and writes the completion into imm_cq as the record is made; the
     * records it wrote are the first imm_written of those waiting, and imm_rang says a
     * write found the client asleep (a doorbell is owed). The first completion it cannot
     * write (the ring full, no wr_id) clears imm_cq: that one and every later one are
     * Python's, in order, until mrc_rx_imm_set() gives a ring again. */
    struct mrc_recvq *imm_rq;
    struct mrc_shmring_tx *imm_cq;
    uint32_t imm_written, imm_rang;
    uint32_t imm_bell;         /* a write woke the client: the lane rang it itself */
};

/* Handle frames i..n-1 (n <= cap) received at time `now` on a port of `plane`. Returns
 * pos << MRC_RX_POS_SHIFT | MRC_RX_SACKS if SACKs wait | MRC_RX_ACKS if SACK records wait
 * | MRC_RX_IMM if completion records wait | MRC_RX_END/SACK/STOP/DONE (pos: where it stopped;
 * n after MRC_RX_END); also in c->pos, c->why. */
int mrc_rx_run(struct mrc_rx_ctx *c, unsigned i, unsigned n, double now, int32_t plane);

/* The responder's write-with-immediate state for the lane's QP (struct mrc_rx_ctx's
 * imm_* fields): the RQ MSN expected, posted receives left, Responder.pingpong and
 * HostConfig.ack_with_data; and its posted receives and receive CQ's ring when the lane
 * may write the completions there itself (NULL, NULL: it may not). */
void mrc_rx_imm_set(struct mrc_rx_ctx *c, uint32_t msn, uint32_t credit, int32_t pingpong,
                    int32_t ack_with_data, struct mrc_recvq *rq, struct mrc_shmring_tx *cq);

/* The ack QP's window now (CRxLane.ack_sync): una, next_seq and early into `a` (the
 * lane's own struct mrc_rx_ack), and the lane takes that QP's SACKs (c->ack = a); nothing
 * while `a` has no table (before a set_ack, or after a refused one). */
void mrc_rx_ack_sync(struct mrc_rx_ctx *c, struct mrc_rx_ack *a, int64_t una,
                     int64_t next_seq, double early);

/* How many SACK records wait in a->rec / a->rec_sent (the caller's until the lane runs
 * again); none wait after. */
uint32_t mrc_rx_ack_take(struct mrc_rx_ack *a);

/* How many completion records wait in c->imm_rec (the caller's until the lane runs
 * again), | how many of them (the first) the lane wrote into the ring itself <<
 * MRC_RX_IMM_WRITTEN_SHIFT | MRC_RX_IMM_RANG if one of those writes owes the client a
 * doorbell | MRC_RX_IMM_BELL if the lane rang one itself; none wait after. */
#define MRC_RX_IMM_WRITTEN_SHIFT 8
#define MRC_RX_IMM_RANG 0x10000
#define MRC_RX_IMM_BELL 0x20000
uint32_t mrc_rx_imm_take(struct mrc_rx_ctx *c);

/* mrc_rx_run() of the one frame buf[0 : len] (as frame 0, i = 0, n = 1), without the
 * caller loading it into ptr / len first (mrc-sim's hosts get a frame per call); the lane
 * keeps no pointer to it after. */
int mrc_rx_one(struct mrc_rx_ctx *c, const uint8_t *buf, uint32_t len, double now,
               int32_t plane);

/* The SACK/NACK frames built since the last take, in one call (each count is a struct
 * read from Python otherwise): sout_len | nsout << 32 | nnack << 42 | nnack_last << 52
 * (sout_max < 1024); the counts are then zero, the frames stay in sout / sport / slen
 * until the next one is built. */
uint64_t mrc_rx_take(struct mrc_rx_ctx *c);

/* Point ptr/len 0..k-1 at the k frames a mrc_recv_batch() kept (k <= cap). */
void mrc_rx_slots(struct mrc_rx_ctx *c, const struct mrc_batch *b, unsigned k);

/* A responder state with an empty ring of `cap` slots (a power of 2), or NULL; and its
 * release. */
struct mrc_rx_qp *mrc_rx_new(uint32_t cap);
void mrc_rx_free(struct mrc_rx_qp *q);

/* Move the ring to `cap` slots (a power of 2 that holds every entry: the caller's
 * window). Returns 0, or -1 if out of memory (the old ring is kept). */
int mrc_rx_grow(struct mrc_rx_qp *q, uint32_t cap);

/* Bit i set when base + i is in the out-of-order set (i < 64): a SACK bitmap. */
uint64_t mrc_rx_bitmap(const struct mrc_rx_qp *q, int64_t base);

/* ---- SACKs ------------------------------------------------------------------------- */

#define MRC_RX_SACK_MAX 512  /* bytes of a SACK frame */

/* A SACK frame template for one path, from mrcnet.core.ctrl.SackTemplate.layout(). */
struct mrc_rx_sackt {
    uint8_t  frame[MRC_RX_SACK_MAX];
    uint32_t len;        /* frame length */
    uint32_t udp_off, seth_off, cc_off;
    uint32_t icrc_from, has_ip, pseudo_sum;  /* for mrc_finish_frame() */
};

/* A NACK frame template for one path, from mrcnet.core.ctrl.NackTemplate.layout(). */
struct mrc_rx_nackt {
    uint8_t  frame[MRC_RX_SACK_MAX];
    uint32_t len;        /* frame length */
    uint32_t udp_off, neth_off;
    uint32_t icrc_from, has_ip, pseudo_sum;  /* for mrc_finish_frame() */
};

/* The SACK frames QueuePair.send_sack sends now (its tail, after the reverse path and
 * the credit are known), written back to back into out (cap bytes; each t->len): one
 * per window base: the first right after the cumulative point, then one per 64-PSN
 * window holding PSNs received since the last SACK beyond the first window (taken from
 * q->unrep, or the nbases given in `bases` when Python knows more than unrep holds).
 * Each carries the EV's bits (UDP source port, outer and inner flow labels), SETH (M
 * SKIP_ONCE when the last packet was CE-marked, PR when `probe` >= 0, the last packet's
 * offset from CACK or the probe id, its EV, CACK = rcv_nxt - 1, the window's offset from
 * CACK and bitmap; SPDCID, DPDCID, CC type/flags and MPR stay the template's) and
 * CC_STATE (its stamp, out-of-order count, `penalty`, bytes received / 256); then its
 * ICRC and UDP checksum. Sets q->unrep_n to 0 and q->rep_high to what they reported.
 * Returns the number of frames, or 0 if they do not fit (nothing written then). */
int mrc_rx_sack(struct mrc_rx_qp *q, const struct mrc_rx_sackt *t, uint8_t *out,
                uint32_t cap, uint32_t ev, uint32_t penalty, int32_t probe,
                const int64_t *bases, uint32_t nbases);
/* cffi: end */

#endif
