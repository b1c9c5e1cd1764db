/* mrcnet C: the EV round robin of one QP (spray.c).
 *
 * mrcnet/core/evs.py ``EVManager.next_ev`` sprays packets round robin over planes, then
 * over each plane's live paths, then over each path's EVs. Its first try for each packet
 * (no SKIP EV met, no EV to avoid) is a plain rotation of counters; ``EVManager.take``
 * asks this code for a whole run of packets at once. Python keeps the EVs and their
 * states and lays them out here (rebuilt when the set or a state changes); the counters
 * are handed over once and stay here from run to run, until Python's next_ev, a new
 * layout or a reader takes them back (mrcnet/core/spray.py CSpray). */
#ifndef MRCNET_SPRAY_H
#define MRCNET_SPRAY_H

#include <stdint.h>

/* cffi: begin */
struct mrc_spray {
    uint32_t nplanes;      /* usable planes, in EVManager.usable_planes order */
    uint64_t rr_plane;     /* the plane rotation counter */
    uint32_t *plane_first; /* per plane: its first path (index into path_*) */
    uint32_t *plane_len;   /* ... and its number of paths (0: take stops there) */
    uint64_t *plane_rr;    /* ... and its path rotation counter */
    uint32_t *path_first;  /* per path: its first EV (index into ev/skip/sent) */
    uint32_t *path_len;    /* ... and its number of EVs (at least 1) */
    uint64_t *path_inst;   /* ... and its EV rotation counter */
    uint32_t *ev;          /* per EV: the EV */
    uint8_t  *skip;        /* ... 1 if it is in state SKIP (take stops there) */
    uint32_t *sent;        /* ... packets given to it (the caller folds and clears) */
};

/* EVs for up to ``k`` packets into ``out``; returns how many (fewer when the next one
 * is not the plain rotation's: a SKIP EV or a plane without paths). */
unsigned mrc_spray_take(struct mrc_spray *s, unsigned k, uint32_t *out);

/* mrc_spray_take, and each EV's run slot and port (slots[i], ports[i]) from tables by
 * path in the layout (path_slot[path], path_port[path]): the sender's templates of one
 * rkey, so that a run of frames goes from the EVs to the build without a Python list. A
 * path whose slot is negative (not made yet, or none: frames built one at a time) stops
 * the take before its EV, and *stop gets that path (-1 when the take stopped for another
 * reason, or did not stop). */
unsigned mrc_spray_take_slots(struct mrc_spray *s, unsigned k, uint32_t *out,
                              const int32_t *path_slot, const uint16_t *path_port,
                              uint16_t *slots, uint16_t *ports, int32_t *stop);

/* cffi: end */

#endif
