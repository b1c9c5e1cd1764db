/* The EV round robin of one QP: see spray.h. */
#include "spray.h"

#include <stddef.h>

/* The rotation's next k EVs; with path_slot, each EV's run slot and port too, stopping
 * before an EV whose path has no slot (mrc_spray_take_slots). */
static inline unsigned take(struct mrc_spray *s, unsigned k, uint32_t *out,
                            const int32_t *path_slot, const uint16_t *path_port,
                            uint16_t *slots, uint16_t *ports, int32_t *stop)
{
    unsigned n = 0;
    if (stop)
        *stop = -1;
    if (!s->nplanes)
        return 0;
    while (n < k) {
        uint32_t p = (uint32_t)(s->rr_plane % s->nplanes);
        uint32_t m = s->plane_len[p];
        if (!m)
            break;
        uint64_t i = s->plane_rr[p];
        uint32_t path = s->plane_first[p] + (uint32_t)(i % m);
        uint64_t c = s->path_inst[path];
        uint32_t e = s->path_first[path] + (uint32_t)(c % s->path_len[path]);
        if (s->skip[e])
            break;
        if (path_slot) {
            if (path_slot[path] < 0) {
                *stop = (int32_t)path;
                break;
            }
            slots[n] = (uint16_t)path_slot[path];
            ports[n] = path_port[path];
        }
        s->rr_plane++;
        s->plane_rr[p] = i + 1;
        s->path_inst[path] = c + 1;
        s->sent[e]++;
        out[n++] = s->ev[e];
    }
    return n;
}

unsigned mrc_spray_take(struct mrc_spray *s, unsigned k, uint32_t *out)
{
    return take(s, k, out, NULL, NULL, NULL, NULL, NULL);
}

unsigned mrc_spray_take_slots(struct mrc_spray *s, unsigned k, uint32_t *out,
                              const int32_t *path_slot, const uint16_t *path_port,
                              uint16_t *slots, uint16_t *ports, int32_t *stop)
{
    return take(s, k, out, path_slot, path_port, slots, ports, stop);
}
