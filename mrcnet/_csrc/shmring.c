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
