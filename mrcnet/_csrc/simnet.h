/* mrcnet C: the simulator's network and event queue (simnet.c), twin of mrcnet/sim/net.py.
 *
 * mrc-sim spends most of its events in the network: a frame's arrival at a switch, its
 * forwarding (uSID shift or SRH step, hop limit, route lookup) and its egress port
 * (priority and data FIFOs, trimming, ECN marking, serialisation, propagation). This is
 * that network, port for port and switch for switch what mrcnet/sim/net.py's EgressPort
 * and Switch do, with the one event queue of the whole simulation: network events run
 * here; Python events (hosts' timers, flow starts, failures) and frames reaching a host
 * are handed back to Python (mrcnet/sim/simnet.py) in the same (time, sequence) order the
 * pure-Python simulator runs them, so both make the same decisions. Random loss (which
 * draws from the simulation's Python generator) stays with the Python network. */
#ifndef MRCNET_SIMNET_H
#define MRCNET_SIMNET_H

#include <stddef.h>
#include <stdint.h>

/* cffi: begin */
/* What stopped simnet_run. */
#define SIMNET_EMPTY 0  /* no event left */
#define SIMNET_PY 1     /* a Python event is due: out->key is its key */
#define SIMNET_HOST 2   /* a frame reached a host: out->host, out->hport, restored in buf */
#define SIMNET_LIMIT 3  /* the next event is later than ``until`` */
#define SIMNET_BUDGET 4 /* ``budget`` events ran */
#define SIMNET_ERROR 5  /* a frame larger than buf: out->len is its size */
#define SIMNET_NOMEM 6  /* out of memory: an event or a frame was lost, the run is void */
/* simnet_run's return value: the above in its low bits; with SIMNET_HOST, the host's port
 * and the host above them (out->hport, out->host: read without a struct field each) */
#define SIMNET_WHY_MASK 0xF
#define SIMNET_HPORT_SHIFT 4   /* (SIMNET_HPORT_MAX ports a host at most) */
#define SIMNET_HPORT_MAX 256
#define SIMNET_HOST_SHIFT 12   /* (SIMNET_HOST_MAX hosts at most) */
#define SIMNET_HOST_MAX 524288

typedef struct simnet simnet;

struct simnet_out {
    double t;        /* the clock after the call */
    uint64_t key;    /* SIMNET_PY: the key simnet_push_py returned */
    int32_t host;    /* SIMNET_HOST: the host the port feeds, and its port */
    int32_t hport;
    uint32_t len;    /* SIMNET_HOST: bytes written to buf (the frame, zeros restored) */
    uint64_t events; /* events this call ran (the one handed back included) */
    uint64_t total;  /* events every call so far ran */
};

struct simnet_port_counters {
    uint64_t tx_frames, tx_bytes, trimmed, ecn_marked, drop_queue, drop_down,
        drop_blackhole, max_queue_bytes;
    uint64_t data_bytes, prio_bytes; /* bytes queued now */
};

struct simnet_switch_counters {
    uint64_t rx_frames, drop_no_route, drop_hop_limit, drop_bad_sid, drop_blackhole;
};

simnet *simnet_new(void);
void simnet_free(simnet *n);
/* Queue a Python event at ``t``: returns its key (its sequence number), 0 without
 * memory. */
uint64_t simnet_push_py(simnet *n, double t);
size_t simnet_pending(simnet *n);

/* A port: ``dscp_class`` has 64 entries, -1 not data, 0 trimmable data, 1 never trimmed;
 * ``mac`` 12 bytes (destination and source written into every frame) or NULL.
 * Returns its index, -1 without memory. */
int simnet_add_port(simnet *n, double s_per_byte, double delay, uint64_t queue_bytes,
                    uint64_t prio_queue_bytes, int trim, uint32_t trim_size,
                    uint64_t ecn_bytes, const uint8_t *mac, uint8_t trim_hi,
                    uint8_t trim_lo, const int8_t *dscp_class);
/* A switch with its 6-byte locator: returns its index, -1 without memory. */
int simnet_add_switch(simnet *n, const uint8_t *locator);
/* The far end of ``port``: a switch (is_host 0) or a host's NIC ``dst_port``. */
void simnet_connect(simnet *n, int port, int is_host, int dst, int dst_port);
/* ``count`` static routes of switch ``sw``: ``keys`` holds them back to back, ``len``
 * bytes each, 6 (a /48 locator) or 16 (a /128 address); ``ports[i]`` is key i's port.
 * Returns 0, -1 without memory or for another ``len``. */
int simnet_routes(simnet *n, int sw, const uint8_t *keys, int len, size_t count,
                  const int32_t *ports);
/* Add ``count`` 16-byte addresses (back to back) to set ``set`` (0, 1, ...); returns
 * 0, -1 without memory. */
int simnet_set_add(simnet *n, int set, const uint8_t *addrs, size_t count);
/* Switch ``sw``'s last resort for a /128: an address in ``set`` goes to ``port``. */
void simnet_fallback(simnet *n, int sw, int set, int port);

/* A host puts a frame on its NIC ``port`` at ``now``: copied, without its all-zero
 * payload when ``keep`` > 0 and the payload is larger than ``keep`` (net.elide_frame).
 * Returns 0, -1 without memory. */
int simnet_send(simnet *n, int port, const uint8_t *frame, uint32_t len, uint32_t keep,
                double now);
void simnet_set_up(simnet *n, int port, int up, double now);
void simnet_set_port_blackhole(simnet *n, int port, int on);
void simnet_set_switch_blackhole(simnet *n, int sw, int on);
void simnet_port_counters(simnet *n, int port, struct simnet_port_counters *out);
void simnet_switch_counters(simnet *n, int sw, struct simnet_switch_counters *out);

/* Run events in (time, sequence) order until one is Python's, a frame reaches a host,
 * the next is later than ``until``, ``budget`` events ran (< 0: no budget) or none is
 * left. Returns what stopped it (SIMNET_WHY_MASK; with SIMNET_HOST the host and its port
 * too: SIMNET_HOST_SHIFT, SIMNET_HPORT_SHIFT). A host's frame goes to ``buf`` (``cap``
 * bytes), which is the network's between calls: it keeps the buffer zero but for the
 * last frame (nothing else may write into it). */
int simnet_run(simnet *n, double until, int64_t budget, uint8_t *buf, uint32_t cap,
               struct simnet_out *out);
/* The module's C calls keep the GIL while this count is above zero (the simulator's
 * loop, single-threaded, raises it for its run: a release and a retake per call cost
 * more than most of its calls do): adds ``delta`` and returns the count. */
int simnet_keep_gil(int delta);
/* cffi: end */

/* (read by the module's call wrappers: cffi_build.py) */
extern int simnet_gil_kept;

#endif
