/* mrcnet C: a doorbell's posts read from a client's send queue (posts.c), bound by
 * mrcnet/daemon/posts.py, whose per-row loop (Posts._post_rows) is its Python twin.
 *
 * A slot is mrcnet.api.shmqueues.WORK_REQUEST, little-endian: op u8 @0, flags u8 @1,
 * qpn u32 @4, wr_id u64 @8, lkey u32 @16, length u32 @20, addr u64 @24, remote_addr
 * u64 @32, rkey u32 @40, imm u32 @44. Every value is the client's: checked here the way
 * the Python loop checks it, nothing trusted. */
#ifndef MRCNET_POSTS_H
#define MRCNET_POSTS_H

#include <stddef.h>
#include <stdint.h>

/* cffi: begin */
/* The leading run of the n slots at ``rows`` (``stride`` bytes apart) that the Python
 * loop would post together: each an ``op_write`` on QP ``qpn`` from region ``lkey``
 * (whose bytes are [base, base + size)) with [addr, addr + length) inside it. Their
 * columns go to the arrays (offset = addr - base; imm[i] and has_imm[i] from the
 * ``f_imm`` flag); *nimm gets how many carry an immediate. Returns the run's length
 * (0: the first slot is not such a write). */
unsigned mrc_sq_writes(const uint8_t *rows, unsigned n, size_t stride, uint32_t op_write,
                       uint32_t f_imm, uint32_t qpn, uint32_t lkey, uint64_t base,
                       uint64_t size, uint64_t *wr_id, uint64_t *offset, uint32_t *length,
                       uint64_t *raddr, uint32_t *rkey, uint32_t *imm, uint8_t *has_imm,
                       unsigned *nimm);
/* cffi: end */

#endif
