/* mrcnet C: NSCC's per-ACK update (cc.c).
 *
 * The same arithmetic as mrcnet.core.cc.NSCC, operation for operation (so the doubles
 * come out bit for bit the same; tests/core/test_nscc.py runs both on random ACK streams
 * and compares every field after each step). NSCC's state lives here for the C class
 * (mrcnet.core.cc.CNSCC), whose attributes read and write these fields. */
#ifndef MRCNET_CC_H
#define MRCNET_CC_H

#include <stdint.h>

/* cffi: begin */
/* The quadrant the last ACK applied (NSCC.quadrant's strings, in this order). */
#define MRC_NSCC_NONE 0
#define MRC_NSCC_PI   1  /* proportional_increase */
#define MRC_NSCC_FI   2  /* fair_increase */
#define MRC_NSCC_MD   3  /* multiplicative_decrease */
#define MRC_NSCC_NC   4  /* no_change */
#define MRC_NSCC_QA   5  /* quick_adapt */

struct mrc_nscc {
    /* parameters (CongestionControl's) */
    double   mss, rate, target_floor, rtt_floor, delay_filter;
    /* NSCC's state, the attributes of the same names */
    double   cwnd, base_rtt, delay, srtt, scale_rtt, bdp, maxwnd, target, fi;
    double   last_md, last_qa;
    double   delay_prev;  /* the previous RTT sample's delay (quick adapt wants both) */
    int32_t  qa_pending, quadrant;
    int64_t  delivered_sum;
    /* (time, bytes) acknowledged in the last delivery RTT, oldest first (a ring) */
    double   *dl_t;
    int64_t  *dl_n;
    uint32_t dl_head, dl_len, dl_cap;
    /* (time, RTT) samples of the standing-RTT filter, increasing RTTs (a ring) */
    double   *st_t, *st_r;
    uint32_t st_head, st_len, st_cap;
};

/* A new NSCC as NSCC.__init__ makes it, or NULL (out of memory); and its release. */
struct mrc_nscc *mrc_nscc_new(double mss, double rate, double base_rtt_hint,
                              double target_floor, double rtt_floor, double delay_filter);
void mrc_nscc_free(struct mrc_nscc *c);
/* NSCC.on_ack (has_rtt 0: rtt is None). 0, or -1 if out of memory (nothing changed). */
int mrc_nscc_on_ack(struct mrc_nscc *c, int64_t acked, double rtt, int has_rtt, int ece,
                    double now);
/* NSCC.on_penalty. */
void mrc_nscc_on_penalty(struct mrc_nscc *c, int32_t penalty, double now);
/* cffi: end */

#endif
