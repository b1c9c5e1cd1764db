/* NSCC's per-ACK update: see cc.h. Each function names the method of
 * mrcnet/core/cc.py NSCC it repeats; the constants are cc.py's NSCC_* (tests/core/test_nscc.py
 * runs both on random ACK streams: any difference shows). */
#include "cc.h"

#include <stdlib.h>
#include <string.h>

#define TARGET_FRACTION 0.5
#define TARGET_FLOOR 1e-6
#define MAX_BDP 1.5
#define ALPHA 0.5
#define FI_BDP 0.01
#define GAMMA 0.8
#define MD_MIN 0.5
#define QA_DELAY 4.0  /* ... in two samples in a row (delay_prev) */
#define PENALTY_SCALE 254.0

/* Python's max(a, b) and min(a, b): the first argument unless the second is strictly
 * larger (smaller). */
static inline double pymax(double a, double b) { return b > a ? b : a; }
static inline double pymin(double a, double b) { return b < a ? b : a; }

static void rescale(struct mrc_nscc *c, double base_rtt)  /* _rescale */
{
    double eff = pymax(base_rtt, c->rtt_floor);
    c->scale_rtt = eff;
    c->bdp = pymax(c->mss, c->rate * eff);
    c->maxwnd = MAX_BDP * c->bdp;
    c->target = pymax(pymax(TARGET_FLOOR, c->target_floor), TARGET_FRACTION * base_rtt);
    c->fi = pymax(c->mss, FI_BDP * c->bdp);
}

static inline void clamp(struct mrc_nscc *c)  /* _clamp */
{
    c->cwnd = pymin(pymax(c->cwnd, c->mss), c->maxwnd);
}

static inline double window_rtt(const struct mrc_nscc *c)  /* _window_rtt */
{
    return c->base_rtt != 0.0 ? pymax(c->base_rtt, c->rtt_floor) : c->scale_rtt;
}

static inline double delivery_rtt(const struct mrc_nscc *c)  /* _delivery_rtt */
{
    return pymax(c->srtt, window_rtt(c));
}

struct mrc_nscc *mrc_nscc_new(double mss, double rate, double base_rtt_hint,
                              double target_floor, double rtt_floor, double delay_filter)
{
    struct mrc_nscc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->mss = mss;
    c->rate = rate;
    c->target_floor = target_floor;
    c->rtt_floor = rtt_floor;
    c->delay_filter = delay_filter;
    rescale(c, base_rtt_hint);
    c->cwnd = c->bdp;
    c->last_md = c->last_qa = -1.0;
    return c;
}

void mrc_nscc_free(struct mrc_nscc *c)
{
    if (!c)
        return;
    free(c->dl_t);
    free(c->dl_n);
    free(c->st_t);
    free(c->st_r);
    free(c);
}

/* Room for one more entry in a ring of (t, x) pairs (x of `size` bytes): doubles it,
 * oldest first at 0. 0, or -1 if out of memory (nothing changed). */
static int ring_room(double **t, void **x, size_t size, uint32_t *head, uint32_t len,
                     uint32_t *cap)
{
    if (len < *cap)
        return 0;
    uint32_t ncap = *cap ? 2 * *cap : 64;
    double *nt = malloc(sizeof *nt * ncap);
    char *nx = malloc(size * ncap);
    if (!nt || !nx) {
        free(nt);
        free(nx);
        return -1;
    }
    for (uint32_t i = 0; i < len; i++) {
        uint32_t j = (*head + i) % *cap;
        nt[i] = (*t)[j];
        memcpy(nx + size * i, (char *)*x + size * j, size);
    }
    free(*t);
    free(*x);
    *t = nt;
    *x = nx;
    *head = 0;
    *cap = ncap;
    return 0;
}

static int quick_adapt(struct mrc_nscc *c, double now)  /* _quick_adapt */
{
    if (c->last_qa >= 0 && now - c->last_qa < window_rtt(c)) {
        c->qa_pending = 0;
        return 0;
    }
    c->last_qa = now;
    c->qa_pending = 0;
    c->quadrant = MRC_NSCC_QA;
    c->cwnd = pymax(c->mss, (double)c->delivered_sum);
    clamp(c);
    return 1;
}

int mrc_nscc_on_ack(struct mrc_nscc *c, int64_t acked, double rtt, int has_rtt, int ece,
                    double now)
{
    int sample = has_rtt && rtt > 0;
    /* both rings first, so running out of memory changes nothing */
    if ((acked && ring_room(&c->dl_t, (void **)&c->dl_n, sizeof *c->dl_n, &c->dl_head,
                            c->dl_len, &c->dl_cap)) ||
        (sample && c->delay_filter > 0 &&
         ring_room(&c->st_t, (void **)&c->st_r, sizeof *c->st_r, &c->st_head, c->st_len,
                   &c->st_cap)))
        return -1;
    if (acked) {
        uint32_t j = (c->dl_head + c->dl_len++) % c->dl_cap;
        c->dl_t[j] = now;
        c->dl_n[j] = acked;
        c->delivered_sum += acked;
        double horizon = now - delivery_rtt(c);
        while (c->dl_len && c->dl_t[c->dl_head] < horizon) {
            c->delivered_sum -= c->dl_n[c->dl_head];
            c->dl_head = (c->dl_head + 1) % c->dl_cap;
            c->dl_len--;
        }
    }
    if (sample) {
        if (c->base_rtt == 0.0 || rtt < c->base_rtt) {
            c->base_rtt = rtt;
            rescale(c, rtt);
        }
        c->srtt = c->srtt == 0.0 ? rtt : c->srtt + 0.125 * (rtt - c->srtt);
        c->delay_prev = c->delay;
        if (c->delay_filter > 0) {
            /* the smallest sample of the last delay_filter x srtt (a monotonic deque) */
            while (c->st_len && c->st_r[(c->st_head + c->st_len - 1) % c->st_cap] >= rtt)
                c->st_len--;
            uint32_t j = (c->st_head + c->st_len++) % c->st_cap;
            c->st_t[j] = now;
            c->st_r[j] = rtt;
            double horizon = now - c->delay_filter * c->srtt;
            while (c->st_t[c->st_head] < horizon) {
                c->st_head = (c->st_head + 1) % c->st_cap;
                c->st_len--;
            }
            c->delay = c->st_r[c->st_head] - c->base_rtt;
        } else {
            c->delay = rtt - c->base_rtt;
        }
    }
    double d = c->delay, target = c->target;
    if ((c->qa_pending || pymin(d, c->delay_prev) > QA_DELAY * target) && quick_adapt(c, now))
        return 0;
    if (!ece) {
        if (d < target) {
            c->quadrant = MRC_NSCC_PI;
            c->cwnd += ALPHA * (double)acked * (target - d) / target;
        } else {
            c->quadrant = MRC_NSCC_FI;
            c->cwnd += c->fi * (double)acked / c->cwnd;
        }
    } else if (d >= target) {
        c->quadrant = MRC_NSCC_MD;
        double sent = has_rtt ? now - rtt : now - delivery_rtt(c);
        if (c->last_md < 0 || (sent >= c->last_md && now - c->last_md >= window_rtt(c))) {
            c->last_md = now;
            c->cwnd *= pymax(1.0 - GAMMA * (d - target) / d, MD_MIN);
        }
    } else {
        c->quadrant = MRC_NSCC_NC;
    }
    clamp(c);
    return 0;
}

void mrc_nscc_on_penalty(struct mrc_nscc *c, int32_t penalty, double now)
{
    if (penalty <= 0 || (c->last_md >= 0 && now - c->last_md < window_rtt(c)))
        return;
    c->last_md = now;
    c->cwnd *= 1.0 - penalty / PENALTY_SCALE;
    clamp(c);
}
