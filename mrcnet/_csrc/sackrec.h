/* mrcnet C: the sender's SACK decisions, their common case (sackrec.c).
 *
 * A QP's EVs keep their RTT estimates and counters here (struct mrc_ev, the numbers of
 * mrcnet.core.evs.EVInfo that a SACK writes; mrcnet/core/evtab.py binds them), found by
 * EV through the QP's table (struct mrc_evtab). The requester's numbers that a SACK's
 * decisions write (mrcnet.core.recovery.Recovery's RTT estimates, RACK's tie, the burst's
 * counters, the reorder allowance's decay) live in struct mrc_snd (mrcnet/core/sackrec.py,
 * CRecovery). mrc_sack_records() makes Recovery._sack_news's decisions for the receive
 * lane's SACK records (rxlane.h struct mrc_rx_ack) as long as each is the common case, the
 * same arithmetic in the same order (so the doubles are bit for bit Python's), and stops
 * at the first that is not, for Python to make (tests/core/test_sackrec.py compares the
 * two record by record). */
#ifndef MRCNET_SACKREC_H
#define MRCNET_SACKREC_H

#include <stdint.h>

#include "cc.h"
#include "txtable.h"

/* cffi: begin */
/* One EV's numbers (EVInfo's attributes of the same names). */
struct mrc_ev {
    double   srtt, rttvar, min_rtt;  /* srtt 0: no sample yet */
    int64_t  acked, ecn, trimmed;
    uint32_t ev;
    int32_t  bad;                    /* its state is ASSUMED_BAD (EVManager._set) */
};

/* A QP's EVs by EV (EVManager.evs; EVs are never removed from it), in the order they
 * were made: EVInfo k of the QP's is e[k] (Python holds indexes, never pointers, so the
 * array may move as it grows). */
struct mrc_evtab {
    uint32_t n, cap;
    struct mrc_ev *e;
};

/* An empty table, or NULL (out of memory); its release. */
struct mrc_evtab *mrc_evtab_new(void);
void mrc_evtab_free(struct mrc_evtab *t);
/* A new EV in the table (its numbers zero): its index, or -1 (out of memory). */
int32_t mrc_evtab_add(struct mrc_evtab *t, uint32_t ev);

/* The requester's numbers a SACK's decisions write that its Python reads most (Recovery's
 * attributes of the same names; rack_tie is (tie_sent, tie_seq)). */
struct mrc_snd {
    double   srtt, rttvar, min_rtt;
    double   tie_sent;
    int64_t  tie_seq;
    uint64_t handled;                /* records made here (tests: not vacuous) */
};

/* What mrc_sack_records() leaves for its caller besides struct mrc_snd: Recovery's
 * attributes that it writes seldom or that its Python reads per frame. Its return value
 * says which of them to read: the index of the first record not made (the low 16 bits)
 * and the MRC_SACK_* flags. */
#define MRC_SACK_INDEX 0xFFFF        /* (records: at most rxlane.h's lane holds) */
#define MRC_SACK_ACKED 0x10000       /* bytes acknowledged: acked */
#define MRC_SACK_SKIP  0x20000       /* ECN echoes: skip[0 : nskip] */
#define MRC_SACK_STALE 0x40000       /* cumulative points behind snd_una: stale */
#define MRC_SACK_REO   0x80000       /* the reorder allowance's decay moved: reo_* */
#define MRC_SACK_OOM   0x100000      /* NSCC ran out of memory at the record returned */
struct mrc_sack_out {
    int64_t  una;                    /* snd_una after the records made */
    int64_t  acked;                  /* bytes they acknowledged (sack_acked's increase) */
    uint32_t stale;                  /* records with a cumulative point behind snd_una */
    int64_t  reo_scale, reo_clean;   /* the allowance's state (from the arguments) */
    double   reo_learned;
    uint32_t nskip;                  /* EVs to skip for their ECN echo, in order ... */
    uint32_t *skip;                  /* ... (room for as many as records) */
};

/* The EV's srtt if measured, else the largest of its path's EVs' (0: none measured):
 * TailLoss._path_srtt. */
double mrc_evtab_path_srtt(const struct mrc_evtab *t, uint32_t ev);
/* Every path with a measured EV: its key (EV >> EV_PATH_SHIFT) and its EVs' largest
 * srtt, at most cap of them (in the order of the table's first EV on each); how many. */
uint32_t mrc_evtab_paths(const struct mrc_evtab *t, uint32_t *keys, double *srtts,
                         uint32_t cap);
/* Records i..n-1 (rxlane.h MRC_RX_ACK_INTS integers each in rec, the triggering send
 * time in sent) at time now, from snd_una una, for a QP with no "declared lost" records
 * and no suspect paths (the caller checks), retry rounds `retries`, its reorder
 * allowance's state reo_* (the last spurious loss at reo_last), NSCC cc. Returns the
 * index of the first record not made (n: all) with the MRC_SACK_* flags. A record is not
 * made here when its EV is ASSUMED_BAD, its mode ALWAYS_SKIP without the ECN echo, or it
 * acknowledges bytes during retry rounds. */
uint32_t mrc_sack_records(struct mrc_snd *s, const struct mrc_evtab *t, struct mrc_nscc *cc,
                          const int64_t *rec, const double *sent, uint32_t i, uint32_t n,
                          double now, int64_t una, int64_t retries, int64_t reo_scale,
                          int64_t reo_clean, double reo_learned, double reo_last,
                          struct mrc_sack_out *o);
/* Recovery.rto(ev): the per-path timeout of a packet on ev (ack_timeout: the QP's
 * attribute, floor: HostConfig.timeout_floor). */
double mrc_sack_rto(const struct mrc_snd *s, const struct mrc_evtab *t, uint32_t ev,
                    double ack_timeout, double floor);
/* RACK's tie pass (TailLoss._detect_tied) over table q: the packets in flight from the
 * oldest, while sent at `limit` with a sequence below tie_seq, each lost once `wait`, or
 * its path's srtt plus the allowance (wait - q->rack_rtt), has passed since `limit`. The
 * lost ones go to lost (at most cap), in order, for the caller to declare lost; *at is
 * the earliest moment of one not yet due (from its value on entry). How many are lost. */
uint32_t mrc_rack_tied(const struct mrc_txq *q, const struct mrc_evtab *t, double limit,
                       int64_t tie_seq, double wait, double now, uint64_t *lost,
                       uint32_t cap, double *at);
/* Recovery's timers, in and out of mrc_sack_after(). */
struct mrc_sack_timers {
    double rack_at, rto_at, tlp_at;
};
/* mrc_sack_after()'s inputs from the host's config and the QP's attributes, filled by
 * the caller once per QP (CRecovery._after_config) and again only when one of them
 * changes: rack_floor is HostConfig.rack_floor or reorder_floor, hold rack_hold or
 * ack_delay, tie_break rack_tie_break, ack_timeout the QP's attribute, timeout_floor,
 * tail_probe, base_rtt_hint and tlp_srtts HostConfig's, tlp_hold its tlp_hold or
 * ack_delay, prompt its tlp_prompt (1, or 2 without ack_with_data; 0: off). A new input
 * of this kind is a new field here. */
struct mrc_sack_cfg {
    double   rack_floor, hold;
    double   ack_timeout, timeout_floor;
    double   base_rtt_hint, tlp_srtts, tlp_hold;
    int32_t  tie_break, tail_probe, prompt;
};
/* Recovery.after_sacks's common case, after the caller took sack_acked (`acked`): RACK
 * (the reorder allowance from Recovery._reorder_allowance's inputs, the config's and
 * reo_scale, reo_learned; its tie pass if tie_break), then, if nothing is lost, the
 * retransmission timer (the oldest packet in flight: its EV's timeout x backoff) and the
 * tail-loss probe (if tail_probe is on and no probe went, tlp_sent 0; rtx: retransmissions
 * are queued; its timeout tlp_srtts x srtt, or the hint before a sample, + tlp_hold, 0 if
 * prompt and the newest packet in flight is a retransmission or a message's end:
 * TailLoss.pto) written to o. Returns 0 then;
 * 1, with nothing written, if RACK finds a packet lost (the caller's Python declares it:
 * Recovery.after_sacks). The caller completes work requests. */
int mrc_sack_after(const struct mrc_snd *s, const struct mrc_evtab *t, const struct mrc_txq *q,
                   const struct mrc_sack_cfg *k, double now, int64_t acked, int rtx,
                   int64_t reo_scale, double reo_learned, double backoff, int tlp_sent,
                   uint64_t *lost, uint32_t cap, struct mrc_sack_timers *o);
/* NackRecovery.on_nack's trimmed case (a retry round's end aside: the caller's) for packet
 * seq reported on ev: NSCC.on_trim, and the packet declared lost (out of flight, its
 * EV's trimmed count) unless it already waits for a retransmission. Returns -1 if the
 * table holds no such transmission (stale: nothing done), 1 if declared lost now (the
 * caller queues the retransmission), 0 if it already waits for one. */
int mrc_sack_trim(struct mrc_txq *q, const struct mrc_evtab *t, struct mrc_nscc *cc,
                  int64_t seq, uint32_t ev);
/* cffi: end */

#endif
