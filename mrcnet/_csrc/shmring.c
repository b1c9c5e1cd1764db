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
#define RING_HEADER 256

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
    uint8_t *slots = base + ring + RING_HEADER;
    uint64_t at = tail & (nslots - 1);
    uint64_t first = nslots - at;  /* slots up to the ring's end */
    if (first > n)
        first = n;
    memcpy(slots + at * slot_size, data, first * slot_size);
    if (n > first)
        memcpy(slots, data + first * slot_size, (n - first) * slot_size);
    uint64_t asleep = mrc_shmring_store_load(base, ring + OFF_TAIL, tail + n,
                                             ring + OFF_ASLEEP);
    if (asleep && once)
        mrc_shmring_store(base, ring + OFF_ASLEEP, 0);
    return (int64_t)(2 * n + (asleep ? 1 : 0));
}
