/* mrcnet C: a completion as a slot of a client's CQ ring (shmqueues.c), bound by
 * mrcnet/api/shmqueues.py, whose encode_completions is its Python twin.
 *
 * A slot is mrcnet.api.shmqueues.COMPLETION, little-endian, in CQ_SLOT bytes: status
 * u8 @0 (an index of STATUSES), opcode u8 @1 (of OPCODES), flags u8 @2 (F_IMM), qpn u32
 * @4, wr_id u64 @8, byte_len u32 @16, imm u32 @20, zeros to the slot's end. */
#ifndef MRCNET_SHMQUEUES_H
#define MRCNET_SHMQUEUES_H

#include "shmring.h"

/* cffi: begin */
#define MRC_CQ_SLOT 32                 /* bytes of a completion's slot */
#define MRC_WC_SUCCESS 0               /* STATUSES.index(WCStatus.SUCCESS) */
#define MRC_WC_RECV_RDMA_WITH_IMM 1    /* OPCODES.index(WCOpcode.RECV_RDMA_WITH_IMM) */
#define MRC_WC_F_IMM 1                 /* the completion carries an immediate */

/* The successful completion of a receive (an incoming write-with-immediate of
 * ``byte_len`` bytes carrying ``imm``, for the receive posted as ``wr_id`` on QP
 * ``qpn``) written into w's ring as one slot, and published, as mrc_shmring_tx_put()
 * returns it: 2 | 1 if the consumer must be rung when written, 0 or 1 when not (no room,
 * or w let go of), -1 if the consumer's head is corrupt (nothing written). */
int mrc_cq_put_recv_imm(struct mrc_shmring_tx *w, uint32_t qpn, uint64_t wr_id,
                        uint32_t byte_len, uint32_t imm);

#define MRC_DOORBELL 0x21              /* the doorbell's one byte (shmclient.DOORBELL) */
/* Ring the client's doorbell for w's ring now: MRC_DOORBELL sent on w->bell_fd without
 * blocking (counted in w->bells). Returns 1 if it was sent, 0 if not (no socket, a full
 * one, or an error: mrcd's Python rings it then, with its own rules). */
int mrc_cq_ring(struct mrc_shmring_tx *w);
/* cffi: end */

#endif
