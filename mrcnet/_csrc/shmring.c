/* mrcnet C: index ordering of the shared-memory rings (see shmring.h). */
#include "shmring.h"

uint64_t mrc_shmring_load(const uint8_t *base, size_t off)
{
    return __atomic_load_n((const uint64_t *)(base + off), __ATOMIC_ACQUIRE);
}

void mrc_shmring_store(uint8_t *base, size_t off, uint64_t value)
{
    __atomic_store_n((uint64_t *)(base + off), value, __ATOMIC_RELEASE);
}

uint64_t mrc_shmring_store_load(uint8_t *base, size_t store_off, uint64_t value,
                                size_t load_off)
{
    __atomic_store_n((uint64_t *)(base + store_off), value, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return __atomic_load_n((const uint64_t *)(base + load_off), __ATOMIC_ACQUIRE);
}

/* The ring's header words (mrcnet/api/shmring.py's OFF_*, HEADER). */
#define OFF_HEAD 0
#define OFF_TAIL 64
#define OFF_ASLEEP 128
#define OFF_BLOCKED 192
#define RING_HEADER 256

/* ``n`` slots from index ``at`` of the ring's slots, to or from ``buf`` (the copy split
 * at the ring's end). */
static void copy_slots(uint8_t *slots, uint64_t nslots, size_t slot_size, uint64_t at,
                       uint8_t *buf, uint64_t n, int into_ring)
{
    at &= nslots - 1;
    uint64_t first = nslots - at;  /* slots up to the ring's end */
    if (first > n)
        first = n;
    uint8_t *a = slots + at * slot_size, *b = buf + first * slot_size;
    size_t la = first * slot_size, lb = (n - first) * slot_size;
    if (into_ring) {
        memcpy(a, buf, la);
        memcpy(slots, b, lb);
    } else {
        memcpy(buf, a, la);
        memcpy(b, slots, lb);
    }
}

int64_t mrc_shmring_take(uint8_t *base, size_t ring, uint64_t nslots, size_t slot_size,
                         uint64_t head, uint64_t max, uint8_t *out)
{
    uint64_t n = mrc_shmring_load(base, ring + OFF_TAIL) - head;
    if (n > nslots)
        return -1;
    if (n > max)
        n = max;
    if (!n)
        return 0;
    copy_slots(base + ring + RING_HEADER, nslots, slot_size, head, out, n, 0);
    uint64_t blocked = mrc_shmring_store_load(base, ring + OFF_HEAD, head + n,
                                              ring + OFF_BLOCKED);
    if (blocked)
        mrc_shmring_store(base, ring + OFF_BLOCKED, 0);
    return (int64_t)(2 * n + (blocked ? 1 : 0));
}

int64_t mrc_shmring_put(uint8_t *base, size_t ring, uint64_t nslots, size_t slot_size,
                        uint64_t tail, const uint8_t *data, uint64_t count, int once)
{
    uint64_t head = mrc_shmring_load(base, ring + OFF_HEAD);
    uint64_t used = tail - head;  /* (free-running 64-bit indices) */
    if (used > nslots)
        return -1;
    uint64_t n = nslots - used;
    if (n > count)
        n = count;
    copy_slots(base + ring + RING_HEADER, nslots, slot_size, tail, (uint8_t *)data, n, 1);
    uint64_t asleep = mrc_shmring_store_load(base, ring + OFF_TAIL, tail + n,
                                             ring + OFF_ASLEEP);
    if (asleep && once)
        mrc_shmring_store(base, ring + OFF_ASLEEP, 0);
    return (int64_t)(2 * n + (asleep ? 1 : 0));
}

int64_t mrc_shmring_tx_put(struct mrc_shmring_tx *w, const uint8_t *data, uint64_t count)
{
    if (!w->base)
        return 0;
    int64_t r = mrc_shmring_put(w->base, w->ring, w->nslots, w->slot_size, w->tail, data,
                                count, w->once);
    if (r > 0)
        w->tail += (uint64_t)r >> 1;
    return r;
}

int mrc_shmring_tx_block(struct mrc_shmring_tx *w)
{
    if (!w->base)
        return 0;
    uint64_t head = mrc_shmring_store_load(w->base, w->ring + OFF_BLOCKED, 1,
                                           w->ring + OFF_HEAD);
    uint64_t used = w->tail - head;
    if (used > w->nslots)
        return -1;
    return used < w->nslots;
}
