/* The EV round robin of one QP: see spray.h. */
#include "spray.h"

unsigned mrc_spray_take(struct mrc_spray *s, unsigned k, uint32_t *out)
{
    unsigned n = 0;
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
        s->rr_plane++;
        s->plane_rr[p] = i + 1;
        s->path_inst[path] = c + 1;
        s->sent[e]++;
        out[n++] = s->ev[e];
    }
    return n;
}
