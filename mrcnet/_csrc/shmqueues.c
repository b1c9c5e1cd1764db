/* mrcnet C: a completion as a slot of a client's CQ ring (see shmqueues.h). */
#include "shmqueues.h"

#include <string.h>
#include <sys/socket.h>

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int mrc_cq_put_recv_imm(struct mrc_shmring_tx *w, uint32_t qpn, uint64_t wr_id,
                        uint32_t byte_len, uint32_t imm)
{
    if (w->slot_size != MRC_CQ_SLOT)
        return 0;
    uint8_t slot[MRC_CQ_SLOT];
    memset(slot, 0, sizeof slot);
    slot[0] = MRC_WC_SUCCESS;
    slot[1] = MRC_WC_RECV_RDMA_WITH_IMM;
    slot[2] = MRC_WC_F_IMM;
    put_le32(slot + 4, qpn);
    put_le32(slot + 8, (uint32_t)wr_id);
    put_le32(slot + 12, (uint32_t)(wr_id >> 32));
    put_le32(slot + 16, byte_len);
    put_le32(slot + 20, imm);
    return (int)mrc_shmring_tx_put(w, slot, 1);
}

int mrc_cq_ring(struct mrc_shmring_tx *w)
{
    static const uint8_t bell = MRC_DOORBELL;
    if (w->bell_fd < 0 || !w->base)
        return 0;
    if (send(w->bell_fd, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
        return 0;
    w->bells++;
    return 1;
}
