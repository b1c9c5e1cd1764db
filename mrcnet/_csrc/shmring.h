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

/* A producer's end of one ring, its index kept here rather than by the caller: mrcd's
 * end of a CQ's completion ring (mrcnet/daemon/rings.py CompletionWriter), which both
 * Python and the receive lane (rxlane.h imm_cq) write, one after the other. */
struct mrc_shmring_tx {
    uint8_t *base;       /* the mapping (NULL: let go of, nothing is written any more) */
    size_t   ring;       /* the ring's offset in it */
    uint64_t nslots;     /* a power of two */
    uint64_t tail;       /* slots published */
    uint32_t slot_size;
    int32_t  once;       /* clear the consumer's asleep flag when ringing (Ring.once) */
    int32_t  direct;     /* the receive lane may write its completions here itself (mrcd
                            clears it while the CQ is moderated) */
    int32_t  bell_fd;    /* the consumer's socket, for the lane's doorbells (-1: none) */
    uint64_t bells;      /* doorbells sent on it by the lane */
};
/* mrc_shmring_put() of ``count`` slots at ``data`` into w's ring at w's tail, which
 * moves by what was written: 2 * written + (1 if the consumer must be rung), -1 if the
 * consumer's head is corrupt, 0 if w was let go of. */
int64_t mrc_shmring_tx_put(struct mrc_shmring_tx *w, const uint8_t *data, uint64_t count);
/* The producer found no room and will wait for the consumer's doorbell (Ring.block):
 * 1 if room appeared meanwhile (then do not wait), 0 if not (or w was let go of), -1 if
 * the consumer's head is corrupt. */
int mrc_shmring_tx_block(struct mrc_shmring_tx *w);
/* cffi: end */

#endif
