/* mrcnet C: the memory ordering of single-producer single-consumer rings in memory
 * shared between a client and mrcd (shmring.c; Python: mrcnet/api/shmring.py).
 *
 * Python can neither order its stores to shared memory nor fence them: these helpers
 * give the ring's indices acquire/release semantics, and a full fence for the "store
 * mine, then load theirs" handshakes that decide whether a doorbell must be rung (a
 * store followed by a load may be reordered even on x86). Every offset is in bytes from
 * the start of a mapping, 8-byte aligned, checked by the caller. */
#ifndef MRCNET_SHMRING_H
#define MRCNET_SHMRING_H

#include <stddef.h>
#include <string.h>
#include <stdint.h>

/* cffi: begin */
/* The 64-bit word at ``off``, loaded with acquire ordering. */
uint64_t mrc_shmring_load(const uint8_t *base, size_t off);
/* Store ``value`` at ``off`` with release ordering (what came before is seen first). */
void mrc_shmring_store(uint8_t *base, size_t off, uint64_t value);
/* Store ``value`` at ``store_off`` (release), full fence, then load the word at
 * ``load_off``: one side's half of a doorbell handshake. */
uint64_t mrc_shmring_store_load(uint8_t *base, size_t store_off, uint64_t value,
                                size_t load_off);
/* The producer's whole put, in one call: as many of the ``count`` slots at ``data``
 * (``slot_size`` bytes each, end to end) as the ring at ``ring`` (its offset in the
 * mapping; ``nslots`` a power of two) has room for are copied in from index ``tail``
 * (across the wrap), the new tail is published (release), then a full fence and a load
 * of ``asleep`` (cleared when ``once`` and set). Returns 2 * written + (1 if the
 * consumer sleeps and must be rung), or -1 if the consumer's head is corrupt (more than
 * ``nslots`` behind ``tail``; nothing written). The Python twin: Ring.put
 * (mrcnet/api/shmring.py). */
int64_t mrc_shmring_put(uint8_t *base, size_t ring, uint64_t nslots, size_t slot_size,
                        uint64_t tail, const uint8_t *data, uint64_t count, int once);
/* The consumer's whole take, in one call: up to ``max`` of the slots published in the
 * ring at ``ring`` from index ``head`` are copied out to ``out`` (end to end, across the
 * wrap); if any, the new head is given back (release), then a full fence and a load of
 * ``blocked`` (cleared when set: the producer waits for room and must be rung).
 * Returns 2 * taken + (1 if the producer must be rung), or -1 if the producer's tail is
 * corrupt (more than ``nslots`` ahead of ``head``; nothing taken). The Python twin:
 * Ring.take (mrcnet/api/shmring.py). */
int64_t mrc_shmring_take(uint8_t *base, size_t ring, uint64_t nslots, size_t slot_size,
                         uint64_t head, uint64_t max, uint8_t *out);
/* cffi: end */

#endif
