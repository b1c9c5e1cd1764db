/* mrcnet C: the requester's table of packets in flight (txtable.c).
 *
 * One entry per PSN of the send window (a ring indexed by seq & mask): its EV, send
 * time, TSETH stamp, transmission count, length and work request, and whether it is
 * still unacknowledged, in flight, or waiting for a retransmission. Packets in flight
 * are also on a list in transmission order (RACK walks it from the oldest).
 *
 * The table does the per-packet bookkeeping of sending and of SACKs; every decision
 * about loss, paths and congestion stays in Python (mrcnet/core/qp.py), which calls
 * in once per run of new packets and once per SACK. mrcnet/core/txtable.py is the
 * pure-Python twin: the tests run both and compare. */
#ifndef MRCNET_TXTABLE_H
#define MRCNET_TXTABLE_H

#include <stdint.h>

/* cffi: begin */
#define MRC_TX_LIVE    1  /* sent and not yet acknowledged */
#define MRC_TX_INFL    2  /* in flight: on the transmission-order list */
#define MRC_TX_PEND    4  /* declared lost, waiting for its retransmission */
#define MRC_TX_LOGGED  8  /* the requester keeps a "declared lost" record of it */

struct mrc_txpkt {
    double   sent;    /* time of the latest transmission */
    uint64_t seq;     /* the sequence number this entry holds (the ring reuses slots) */
    uint32_t ev, len, off, wr;  /* wr: the work request's slot */
    uint32_t tx;      /* transmissions so far */
    int32_t  prev, next;  /* transmission-order list of packets in flight (-1: none) */
    uint16_t ts;      /* TSETH stamp of the latest transmission */
    uint8_t  opcode, flags;
};

/* What one SACK did, for the requester's decisions in Python. */
struct mrc_txsack {
    /* the triggering packet, if the SACK is about its latest transmission */
    uint32_t trig_tx;     /* 0: no match */
    double   trig_sent;
    /* acknowledged packets per path (EV >> 12): the newest send time of each */
    uint32_t npaths;
    uint32_t *path_key;
    double   *path_sent;
    /* acknowledged packets that carry MRC_TX_LOGGED */
    uint32_t nspecial;
    uint64_t *special_seq;
    double   *special_sent;
    uint8_t  *special_pend;  /* it was waiting for a retransmission */
};

/* A path's newest send time acknowledged (open addressing by path key; key
 * MRC_TX_NO_PATH: an empty slot). */
#define MRC_TX_NO_PATH 0xFFFFFFFF
struct mrc_txpath {
    uint32_t key;
    double   acked;
};

struct mrc_txq {
    struct mrc_txpkt *pk;
    uint32_t mask;        /* ring size - 1 (a power of two at least the send window) */
    int32_t  *wr_unacked; /* packets of each work request not yet acknowledged */
    uint32_t wr_mask;
    int32_t  head, tail;  /* the list of packets in flight, oldest first */
    uint32_t ninfl;
    uint64_t infl_bytes;
    double   rack_sent;   /* newest send time of any acknowledged packet (-1: none) */
    double   rack_rtt;    /* ... and its RTT */
    uint64_t seen_base, seen_bm;  /* the newest first SACK window walked, its bits */
    struct mrc_txpath *paths;     /* per path (EV >> 12): newest send time acknowledged */
    uint32_t pmask;               /* slots - 1 (a power of two, twice the paths or more) */
};

void mrc_tx_init(struct mrc_txq *t, uint64_t seq);
/* New packets seq0 .. seq0+n-1 of work request slot ``wr``, sent now: packet i is
 * bytes [off0 + i*seg, ...) of it, at most ``seg`` and within ``total``. */
void mrc_tx_send(struct mrc_txq *t, uint64_t seq0, unsigned n, const uint32_t *ev,
                 const uint8_t *op, uint32_t wr, uint32_t off0, uint32_t seg,
                 uint32_t total, double now, uint16_t ts);
/* New packets seq0 .. seq0+n-1, one whole work request each (single-packet messages):
 * packet i is the ``len[i]`` bytes at offset 0 of work request slot ``wr[i]``. The same
 * entries as one mrc_tx_send(..., n = 1, wr[i], 0, seg, len[i], ...) per packet. */
void mrc_tx_send_msgs(struct mrc_txq *t, uint64_t seq0, unsigned n, const uint32_t *ev,
                      const uint8_t *op, const uint32_t *wr, const uint32_t *len,
                      double now, uint16_t ts);
/* A retransmission of ``seq`` on ``ev``, now (back on the list, at its end). */
int mrc_tx_resend(struct mrc_txq *t, int64_t seq, uint32_t ev, double now, uint16_t ts);
/* The entry of an unacknowledged ``seq`` (CTxTable.get's fields, in its order, the send
 * time apart): ints = ev, ts, tx, len, off, opcode, wr, flags; *sent. 0 if the table does
 * not hold it (nothing written). */
int mrc_tx_get(const struct mrc_txq *t, int64_t seq, int64_t *ints, double *sent);
/* ``seq`` is declared lost: off the list, waiting for a retransmission. */
int mrc_tx_lose(struct mrc_txq *t, int64_t seq);
/* A SACK: cumulative point ``cack`` (the walk starts at ``snd_una``), and a bitmap
 * ``bm`` over [base, base+64) (``first``: the window right after the cumulative point,
 * whose already walked bits are skipped). Returns the bytes acknowledged (a packet
 * without payload counts one). */
uint64_t mrc_tx_sack(struct mrc_txq *t, double now, int64_t snd_una, int64_t cack,
                     int64_t next_seq, int64_t base, uint64_t bm, int first,
                     int64_t trig, uint32_t ev, uint32_t ts, struct mrc_txsack *o);
/* RACK: packets in flight sent before ``limit`` and ``wait`` or more ago are lost
 * (written to ``lost``, at most ``cap``); *at: when the next one would be (else inf). */
unsigned mrc_tx_rack(const struct mrc_txq *t, double limit, double wait, double now,
                     uint64_t *lost, unsigned cap, double *at);
/* Set (``on``) or clear MRC_TX_LOGGED of ``seq``; 0 if the table does not hold it. */
int mrc_tx_log(struct mrc_txq *t, int64_t seq, int on);
/* The newest send time of a packet acknowledged on path ``key`` (-1: none yet). */
double mrc_tx_path_acked(const struct mrc_txq *t, uint32_t key);
/* The packets in flight, oldest first (at most ``cap``). */
unsigned mrc_tx_inflight(const struct mrc_txq *t, uint64_t *out, unsigned cap);
/* RACK's walk for the packets the peer reports at once (core/tailloss.py
 * _prompt_losses), its common case in C: over the packets in flight, oldest first, up to
 * the first sent after ``limit`` (one sent at ``limit`` only if ``tied`` and its seq is
 * below ``tie_seq``), a packet sent before ``limit`` and retransmitted or of an opcode
 * ``ends`` marks (256 entries) is due at sent + ``rtt`` + ``window``: the earliest still
 * to come lowers ``*at``; one due by ``now`` sets ``*at`` to -1 and ends the walk (0
 * returned). The rest Python decides: such a packet sent at ``limit`` (the tie-break's
 * bound) and ``una`` (a gap fill), named in ``out`` in the walk's order. */
unsigned mrc_tx_prompt_scan(const struct mrc_txq *t, double limit, int tied,
                            uint64_t tie_seq, uint64_t una, const char *ends, double rtt,
                            double window, double now, double *at, uint64_t *out,
                            unsigned cap);

/* cffi: end */

#endif
