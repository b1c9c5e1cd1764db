/* A doorbell's posts read from a client's send queue. See posts.h for the contract. */
#include "posts.h"

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

unsigned mrc_sq_writes(const uint8_t *rows, unsigned n, size_t stride, uint32_t op_write,
                       uint32_t f_imm, uint32_t qpn, uint32_t lkey, uint64_t base,
                       uint64_t size, uint64_t *wr_id, uint64_t *offset, uint32_t *length,
                       uint64_t *raddr, uint32_t *rkey, uint32_t *imm, uint8_t *has_imm,
                       unsigned *nimm)
{
    unsigned k = 0, with_imm = 0;
    for (; k < n; k++) {
        const uint8_t *r = rows + (size_t)k * stride;
        if (r[0] != op_write || le32(r + 4) != qpn || le32(r + 16) != lkey)
            break;
        uint64_t addr = le64(r + 24);
        uint32_t len = le32(r + 20);
        /* addr - base >= 0 and offset + length <= size, without wrapping */
        if (addr < base || addr - base > size || (uint64_t)len > size - (addr - base))
            break;
        wr_id[k] = le64(r + 8);
        offset[k] = addr - base;
        length[k] = len;
        raddr[k] = le64(r + 32);
        rkey[k] = le32(r + 40);
        imm[k] = le32(r + 44);
        has_imm[k] = (r[1] & f_imm) != 0;
        with_imm += has_imm[k];
    }
    *nimm = with_imm;
    return k;
}
