/* The simulator's network and event queue: see simnet.h. Every step mirrors
 * mrcnet/sim/net.py (EgressPort.send/_wake/_transmit/_arrive, Switch.receive) in the same
 * order and with the same floating-point expressions, so both pick the same times. */
#include "simnet.h"

#include <stdlib.h>
#include <string.h>

/* Offsets into a frame (mrcnet/sim/net.py's module docstring). */
#define TC_HI 14
#define TC_LO 15
#define NEXT_HEADER 20
#define HOP_LIMIT 21
#define DA 38
#define DA_LOC_END (DA + 6)
#define DA_END (DA + 16)
#define SRH_SL (54 + 3)
#define SRH_SEGS (54 + 8)
#define ROUTING 43 /* IPPROTO_ROUTING */
#define ECN_MASK 0x30
#define CE 0x30
#define ICRC 4
#define TIE 1e-15
/* Set members share the route table: their ``len`` (17) keeps them apart from routes. */
#define SET_LEN 17

enum { EV_PY, EV_ARRIVE, EV_WAKE };

struct frame {
    struct frame *next;
    uint32_t len; /* bytes carried */
    uint32_t gap; /* zeros left out before the last ICRC bytes (0: none) */
    uint8_t data[];
};

struct fifo {
    struct frame *head, *tail;
    uint64_t n;
};

struct port {
    double s_per_byte, delay, busy_until, last_down;
    uint64_t queue_bytes, prio_queue_bytes, ecn_bytes;
    uint32_t trim_size;
    uint8_t trim, up, blackhole, waking, has_mac, trim_hi, trim_lo, is_host;
    uint8_t mac[12];
    int8_t dscp[64];
    int32_t dst, dst_port;
    struct fifo dq, pq;
    struct simnet_port_counters c;
};

struct sw {
    uint8_t locator[6];
    uint8_t blackhole;
    int32_t fb_set, fb_port; /* the /128 fallback: a set of addresses and its port */
    struct simnet_switch_counters c;
};

struct ev {
    double t;
    uint64_t seq;
    uint32_t kind;
    int32_t obj;
    struct frame *f;
};

struct route {
    uint8_t key[16];
    int32_t sw; /* -1: empty slot */
    int32_t port;
    uint8_t len;
};

struct simnet {
    double now;
    int nomem; /* an event could not be queued */
    uint64_t seq;
    struct ev *heap;
    size_t n, cap;
    struct port *ports;
    size_t nports, cports;
    struct sw *sws;
    size_t nsws, csws;
    struct route *routes;
    size_t nroutes, croutes; /* croutes: a power of two */
    uint64_t ran;            /* events run (simnet_out.total) */
    /* The host frame buffer simnet_run last wrote (zbuf, zcap bytes): zero but for the
     * last frame's bytes [0, za) and [zb, zc), so that an elided frame's zeros need not
     * be written again each time (8 KiB a data frame); another buffer is cleared once. */
    uint8_t *zbuf;
    uint32_t zcap, za, zb, zc;
};

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

simnet *simnet_new(void)
{
    return calloc(1, sizeof(simnet));
}

static void free_fifo(struct fifo *q)
{
    struct frame *f = q->head;
    while (f) {
        struct frame *nx = f->next;
        free(f);
        f = nx;
    }
    q->head = q->tail = NULL;
    q->n = 0;
}

void simnet_free(simnet *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        free(n->heap[i].f);
    for (size_t i = 0; i < n->nports; i++) {
        free_fifo(&n->ports[i].dq);
        free_fifo(&n->ports[i].pq);
    }
    free(n->heap);
    free(n->ports);
    free(n->sws);
    free(n->routes);
    free(n);
}

/* --- the event queue: a binary heap on (time, sequence) ----------------------------- */

static inline int before(const struct ev *a, const struct ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static uint64_t push(simnet *n, double t, uint32_t kind, int32_t obj, struct frame *f)
{
    if (grow((void **)&n->heap, &n->cap, n->n + 1, sizeof(struct ev))) {
        n->nomem = 1; /* (the run stops with SIMNET_NOMEM: its results would be wrong) */
        free(f);
        return 0;
    }
    struct ev e = {t, ++n->seq, kind, obj, f};
    size_t i = n->n++;
    while (i) {
        size_t up = (i - 1) / 2;
        if (!before(&e, &n->heap[up]))
            break;
        n->heap[i] = n->heap[up];
        i = up;
    }
    n->heap[i] = e;
    return e.seq;
}

static struct ev pop(simnet *n)
{
    struct ev top = n->heap[0];
    struct ev last = n->heap[--n->n];
    size_t i = 0, m = n->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && before(&n->heap[c + 1], &n->heap[c]))
            c++;
        if (!before(&n->heap[c], &last))
            break;
        n->heap[i] = n->heap[c];
        i = c;
    }
    if (m)
        n->heap[i] = last;
    return top;
}

uint64_t simnet_push_py(simnet *n, double t)
{
    return push(n, t, EV_PY, 0, NULL);
}

int simnet_gil_kept;

int simnet_keep_gil(int delta)
{
    return __atomic_add_fetch(&simnet_gil_kept, delta, __ATOMIC_RELAXED);
}

size_t simnet_pending(simnet *n)
{
    return n->n;
}

/* --- set-up ------------------------------------------------------------------------- */

int simnet_add_port(simnet *n, double s_per_byte, double delay, uint64_t queue_bytes,
                    uint64_t prio_queue_bytes, int trim, uint32_t trim_size,
                    uint64_t ecn_bytes, const uint8_t *mac, uint8_t trim_hi,
                    uint8_t trim_lo, const int8_t *dscp_class)
{
    if (grow((void **)&n->ports, &n->cports, n->nports + 1, sizeof(struct port)))
        return -1;
    struct port *p = &n->ports[n->nports];
    memset(p, 0, sizeof(*p));
    p->s_per_byte = s_per_byte;
    p->delay = delay;
    p->last_down = -1.0;
    p->queue_bytes = queue_bytes;
    p->prio_queue_bytes = prio_queue_bytes;
    p->trim = (uint8_t)(trim != 0);
    p->trim_size = trim_size;
    p->ecn_bytes = ecn_bytes;
    p->trim_hi = trim_hi;
    p->trim_lo = trim_lo;
    p->up = 1;
    p->dst = -1;
    if (mac) {
        p->has_mac = 1;
        memcpy(p->mac, mac, 12);
    }
    memcpy(p->dscp, dscp_class, 64);
    return (int)n->nports++;
}

int simnet_add_switch(simnet *n, const uint8_t *locator)
{
    if (grow((void **)&n->sws, &n->csws, n->nsws + 1, sizeof(struct sw)))
        return -1;
    struct sw *s = &n->sws[n->nsws];
    memset(s, 0, sizeof(*s));
    memcpy(s->locator, locator, 6);
    s->fb_set = -1;
    return (int)n->nsws++;
}

void simnet_connect(simnet *n, int port, int is_host, int dst, int dst_port)
{
    struct port *p = &n->ports[port];
    p->is_host = (uint8_t)(is_host != 0);
    p->dst = dst;
    p->dst_port = dst_port;
}

/* --- routes: one open-addressing table for every switch, keyed by (switch, bytes) ----- */

static uint64_t route_hash(int sw, const uint8_t *key, int len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uint32_t)sw;
    int m = len == SET_LEN ? 16 : len;
    h ^= (uint64_t)len << 40;
    for (int i = 0; i < m; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static struct route *route_slot(struct route *t, size_t cap, int sw, const uint8_t *key,
                                int len)
{
    size_t i = route_hash(sw, key, len) & (cap - 1);
    for (;;) {
        struct route *r = &t[i];
        if (r->sw < 0
            || (r->sw == sw && r->len == len && !memcmp(r->key, key, len == SET_LEN ? 16 : len)))
            return r;
        i = (i + 1) & (cap - 1);
    }
}

static int route_rehash(simnet *n, size_t cap)
{
    struct route *t = malloc(cap * sizeof(*t));
    if (!t)
        return -1;
    for (size_t i = 0; i < cap; i++)
        t[i].sw = -1;
    for (size_t i = 0; i < n->croutes; i++) {
        struct route *r = &n->routes[i];
        if (r->sw >= 0)
            *route_slot(t, cap, r->sw, r->key, r->len) = *r;
    }
    free(n->routes);
    n->routes = t;
    n->croutes = cap;
    return 0;
}

static int route_put(simnet *n, int sw, const uint8_t *key, int len, int port)
{
    if (4 * (n->nroutes + 1) > 3 * n->croutes
        && route_rehash(n, n->croutes ? 2 * n->croutes : 1024))
        return -1;
    struct route *r = route_slot(n->routes, n->croutes, sw, key, len);
    if (r->sw < 0) {
        n->nroutes++;
        r->sw = sw;
        r->len = (uint8_t)len;
        memset(r->key, 0, sizeof(r->key));
        memcpy(r->key, key, len == SET_LEN ? 16 : len);
    }
    r->port = port;
    return 0;
}

int simnet_routes(simnet *n, int sw, const uint8_t *keys, int len, size_t count,
                  const int32_t *ports)
{
    if (len != 6 && len != 16)
        return -1;
    for (size_t i = 0; i < count; i++)
        if (route_put(n, sw, keys + i * (size_t)len, len, ports[i]))
            return -1;
    return 0;
}

int simnet_set_add(simnet *n, int set, const uint8_t *addrs, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (route_put(n, set, addrs + 16 * i, SET_LEN, 0))
            return -1;
    return 0;
}

void simnet_fallback(simnet *n, int sw, int set, int port)
{
    n->sws[sw].fb_set = set;
    n->sws[sw].fb_port = port;
}

static int route_get(simnet *n, int sw, const uint8_t *key, int len)
{
    if (!n->croutes)
        return -1;
    struct route *r = route_slot(n->routes, n->croutes, sw, key, len);
    return r->sw < 0 ? -1 : r->port;
}

/* --- ports (EgressPort) -------------------------------------------------------------- */

static inline uint64_t wire(const struct frame *f)
{
    return (uint64_t)f->len + f->gap;
}

static inline void fifo_push(struct fifo *q, struct frame *f)
{
    f->next = NULL;
    if (q->tail)
        q->tail->next = f;
    else
        q->head = f;
    q->tail = f;
    q->n++;
}

static inline struct frame *fifo_pop(struct fifo *q)
{
    struct frame *f = q->head;
    q->head = f->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    return f;
}

static void transmit(simnet *n, int pi, struct frame *f, double now, uint64_t size)
{
    struct port *p = &n->ports[pi];
    double done = now + (double)size * p->s_per_byte;
    p->busy_until = done;
    p->c.tx_frames++;
    p->c.tx_bytes += size;
    if (p->blackhole) {
        p->c.drop_blackhole++;
        free(f);
        return;
    }
    push(n, done + p->delay, EV_ARRIVE, pi, f);
}

static void enqueue_prio(struct port *p, struct frame *f, uint64_t size)
{
    if (p->prio_queue_bytes && p->c.prio_bytes + size > p->prio_queue_bytes) {
        p->c.drop_queue++;
        free(f);
        return;
    }
    fifo_push(&p->pq, f);
    p->c.prio_bytes += size;
}

static void port_send(simnet *n, int pi, struct frame *f)
{
    struct port *p = &n->ports[pi];
    if (!p->up) {
        p->c.drop_down++;
        free(f);
        return;
    }
    if (p->has_mac)
        memcpy(f->data, p->mac, 12);
    uint64_t size = wire(f);
    double now = n->now;
    if (now + TIE >= p->busy_until && !p->waking) {
        transmit(n, pi, f, now, size);
        return;
    }
    uint8_t lo = f->data[TC_LO];
    int cls = p->dscp[((f->data[TC_HI] & 0x0F) << 2) | (lo >> 6)];
    if (cls >= 0) {
        uint64_t cap = p->queue_bytes;
        if (cap && p->c.data_bytes + size > cap) {
            if (!p->trim || cls == 1 || size <= p->trim_size) {
                p->c.drop_queue++;
                free(f);
                return;
            }
            if (f->len > p->trim_size) /* (the elided part goes with the rest) */
                f->len = p->trim_size;
            f->gap = 0;
            f->data[TC_HI] = (uint8_t)((f->data[TC_HI] & 0xF0) | p->trim_hi);
            f->data[TC_LO] = (uint8_t)((lo & 0x3F) | p->trim_lo);
            p->c.trimmed++;
            enqueue_prio(p, f, f->len);
        } else {
            uint8_t ect = lo & ECN_MASK;
            if (p->ecn_bytes && p->c.data_bytes > p->ecn_bytes && ect && ect != CE) {
                f->data[TC_LO] = lo | CE;
                p->c.ecn_marked++;
            }
            fifo_push(&p->dq, f);
            p->c.data_bytes += size;
            if (p->c.data_bytes > p->c.max_queue_bytes)
                p->c.max_queue_bytes = p->c.data_bytes;
        }
    } else {
        enqueue_prio(p, f, size);
    }
    if (!p->waking) {
        p->waking = 1;
        push(n, p->busy_until, EV_WAKE, pi, NULL);
    }
}

static void port_wake(simnet *n, int pi)
{
    struct port *p = &n->ports[pi];
    struct frame *f;
    uint64_t size;
    p->waking = 0;
    if (p->pq.head) {
        f = fifo_pop(&p->pq);
        size = wire(f);
        p->c.prio_bytes -= size;
    } else if (p->dq.head) {
        f = fifo_pop(&p->dq);
        size = wire(f);
        p->c.data_bytes -= size;
    } else {
        return;
    }
    transmit(n, pi, f, n->now, size);
    if (p->pq.head || p->dq.head) {
        p->waking = 1;
        push(n, p->busy_until, EV_WAKE, pi, NULL);
    }
}

/* --- switches (Switch.receive) ------------------------------------------------------- */

static void switch_receive(simnet *n, int si, struct frame *f)
{
    struct sw *s = &n->sws[si];
    uint8_t *d = f->data;
    s->c.rx_frames++;
    if (s->blackhole) {
        s->c.drop_blackhole++;
        free(f);
        return;
    }
    if (f->len < DA_END) { /* (not a frame the simulator makes: no address to read) */
        s->c.drop_bad_sid++;
        free(f);
        return;
    }
    if (!memcmp(d + DA, s->locator, 6)) {
        if (d[DA_LOC_END] || d[DA_LOC_END + 1]) {
            memmove(d + DA + 4, d + DA_LOC_END, DA_END - DA_LOC_END);
            d[DA_END - 2] = 0;
            d[DA_END - 1] = 0;
        } else if (f->len > SRH_SL && d[NEXT_HEADER] == ROUTING && d[SRH_SL] > 0
                   && (uint32_t)SRH_SEGS + 16u * d[SRH_SL] <= f->len) {
            uint8_t sl = (uint8_t)(d[SRH_SL] - 1);
            d[SRH_SL] = sl;
            memcpy(d + DA, d + SRH_SEGS + 16 * sl, 16);
        } else {
            s->c.drop_bad_sid++;
            free(f);
            return;
        }
    }
    uint8_t hl = d[HOP_LIMIT];
    if (hl <= 1) {
        s->c.drop_hop_limit++;
        free(f);
        return;
    }
    d[HOP_LIMIT] = (uint8_t)(hl - 1);
    int out = route_get(n, si, d + DA, 6);
    if (out < 0)
        out = route_get(n, si, d + DA, 16);
    if (out < 0 && s->fb_set >= 0 && route_get(n, s->fb_set, d + DA, SET_LEN) >= 0)
        out = s->fb_port;
    if (out < 0) {
        s->c.drop_no_route++;
        free(f);
        return;
    }
    port_send(n, out, f);
}

/* --- what Python calls during the run ------------------------------------------------ */

int simnet_send(simnet *n, int port, const uint8_t *frame, uint32_t len, uint32_t keep,
                double now)
{
    int64_t gap = (int64_t)len - keep - ICRC;
    struct frame *f;
    n->now = now;
    if (keep && gap > (int64_t)keep) {
        f = malloc(sizeof(*f) + keep + ICRC);
        if (!f) {
            n->nomem = 1;
            return -1;
        }
        memcpy(f->data, frame, keep);
        memcpy(f->data + keep, frame + len - ICRC, ICRC);
        f->len = keep + ICRC;
        f->gap = (uint32_t)gap;
    } else {
        f = malloc(sizeof(*f) + len);
        if (!f) {
            n->nomem = 1;
            return -1;
        }
        memcpy(f->data, frame, len);
        f->len = len;
        f->gap = 0;
    }
    port_send(n, port, f);
    return 0;
}

void simnet_set_up(simnet *n, int port, int up, double now)
{
    struct port *p = &n->ports[port];
    if (!up && p->up)
        p->last_down = now;
    p->up = (uint8_t)(up != 0);
    if (!up) {
        p->c.drop_down += p->dq.n + p->pq.n;
        free_fifo(&p->dq);
        free_fifo(&p->pq);
        p->c.data_bytes = p->c.prio_bytes = 0;
    }
}

void simnet_set_port_blackhole(simnet *n, int port, int on)
{
    n->ports[port].blackhole = (uint8_t)(on != 0);
}

void simnet_set_switch_blackhole(simnet *n, int sw, int on)
{
    n->sws[sw].blackhole = (uint8_t)(on != 0);
}

void simnet_port_counters(simnet *n, int port, struct simnet_port_counters *out)
{
    *out = n->ports[port].c;
}

void simnet_switch_counters(simnet *n, int sw, struct simnet_switch_counters *out)
{
    *out = n->sws[sw].c;
}

/* The bytes the last frame left in the host frame buffer at or beyond `from` zeroed
 * (those below it the next frame overwrites): the buffer is then zero from `from` on. */
static void clear_last(simnet *n, uint8_t *buf, uint32_t from)
{
    if (n->za > from)
        memset(buf + from, 0, n->za - from);
    if (n->zc > n->zb)
        memset(buf + n->zb, 0, n->zc - n->zb);
}

int simnet_run(simnet *n, double until, int64_t budget, uint8_t *buf, uint32_t cap,
               struct simnet_out *out)
{
    uint64_t ran = 0;
    int why = SIMNET_EMPTY;
    while (n->n) {
        if (n->nomem) {
            why = SIMNET_NOMEM;
            break;
        }
        if (budget >= 0 && ran >= (uint64_t)budget) {
            why = SIMNET_BUDGET;
            break;
        }
        if (n->heap[0].t > until) {
            why = SIMNET_LIMIT;
            break;
        }
        struct ev e = pop(n);
        n->now = e.t;
        ran++;
        if (e.kind == EV_PY) {
            out->key = e.seq;
            why = SIMNET_PY;
            break;
        }
        if (e.kind == EV_WAKE) {
            port_wake(n, e.obj);
            continue;
        }
        /* EV_ARRIVE: a frame on the wire when the link went down is lost with it. */
        struct port *p = &n->ports[e.obj];
        struct frame *f = e.f;
        double ld = p->last_down;
        if (!p->up
            || (ld >= 0.0 && ld >= n->now - p->delay - (double)wire(f) * p->s_per_byte)) {
            p->c.drop_down++;
            free(f);
            continue;
        }
        if (!p->is_host) {
            switch_receive(n, p->dst, f);
            continue;
        }
        /* A host's frame: handed over whole, its zeros back (net.restore_frame). */
        uint64_t size = wire(f);
        if (size > cap) {
            out->len = (uint32_t)size;
            free(f);
            why = SIMNET_ERROR;
            break;
        }
        if (buf != n->zbuf || cap > n->zcap) {  /* a buffer not known zero: clear it */
            memset(buf, 0, cap);
            n->zbuf = buf;
            n->zcap = cap;
            n->za = n->zb = n->zc = 0;
        }
        if (f->gap) {
            uint32_t keep = f->len - ICRC;
            clear_last(n, buf, keep);  /* the zeros in between are there already */
            memcpy(buf, f->data, keep);
            memcpy(buf + keep + f->gap, f->data + keep, ICRC);
            n->za = keep;
            n->zb = keep + f->gap;
            n->zc = n->zb + ICRC;
        } else {
            clear_last(n, buf, f->len);
            memcpy(buf, f->data, f->len);
            n->za = f->len;
            n->zb = n->zc = 0;
        }
        out->len = (uint32_t)size;
        out->host = p->dst;
        out->hport = p->dst_port;
        free(f);
        why = SIMNET_HOST | p->dst_port << SIMNET_HPORT_SHIFT | p->dst << SIMNET_HOST_SHIFT;
        break;
    }
    if (n->nomem)
        why = SIMNET_NOMEM;
    out->t = n->now;
    out->events = ran;
    n->ran += ran;
    out->total = n->ran;
    return why;
}
