"""Build ``mrcnet._fastpath`` (cffi API mode) from mrcnet/_csrc during ``pip install``.

The cdef below mirrors mrcnet/_csrc/fastpath.h. System structs are declared opaque
(``...;``): API mode takes their real sizes from the system headers at build time.
Needs only a C compiler and the Python headers (the CRC is in mrcnet/_csrc/crc32.c).
"""

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "mrcnet" / "_csrc"

ffibuilder = FFI()


def _cdef_of(header: Path) -> str:
    """The declarations of ``header`` between its ``cffi: begin`` / ``cffi: end`` markers."""
    text = header.read_text()
    return text.split("/* cffi: begin */", 1)[1].split("/* cffi: end */", 1)[0]


ffibuilder.cdef(
    """
    struct mmsghdr { ...; };
    struct iovec { ...; };
    struct sockaddr_ll { ...; };

    uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                               const uint8_t *udp, size_t udp_len);
    uint16_t mrc_udp6_sum(const uint8_t *src, const uint8_t *dst,
                          const uint8_t *udp, size_t udp_len);
    uint32_t mrc_crc32(uint32_t crc, const uint8_t *p, size_t n);
    int mrc_crc32_impl(int want);
    int mrc_sum_impl(int want);
    uint32_t mrc_icrc(const uint8_t *p, size_t len, int has_ip);

    #define MRC_TMPL_HDR_MAX 512
    #define MRC_EXT_IMM 1
    #define MRC_EXT_TSETH 2
    struct mrc_tmpl {
        uint8_t  hdr[MRC_TMPL_HDR_MAX];
        uint32_t hdr_len;
        uint32_t off_outer_ip;
        uint32_t off_srh_segs;
        uint32_t srh_segs_len;
        uint32_t off_inner_ip;
        uint32_t off_udp;
        uint32_t off_bth;
        uint32_t off_reth;
        uint32_t imm_first;
        uint32_t icrc_le;
        uint32_t pseudo_sum;
        uint8_t  pseudo_src[16];
    };
    size_t mrc_patch_data(uint8_t *out, size_t cap, const struct mrc_tmpl *t,
                          uint32_t opcode, uint32_t bth_flags, uint32_t psn, uint32_t ev,
                          const uint8_t *outer_da, const uint8_t *srh_segs,
                          const uint8_t *pseudo_dst, uint64_t va,
                          uint32_t ext, uint32_t msn, uint32_t imm, uint32_t timestamp,
                          const uint8_t *payload, size_t payload_len);
    uint32_t mrc_tmpl_addr_sum(const uint8_t *src, const uint8_t *dst);
    void mrc_finish_frame(uint8_t *frame, size_t len, uint32_t icrc_from, int has_ip,
                          uint32_t udp_off, uint32_t pseudo_sum);
    struct mrc_path {
        const struct mrc_tmpl *tmpl;
        const uint8_t *outer_da, *srh_segs, *pseudo_dst;
    };
    size_t mrc_patch_run(uint8_t *out, size_t cap, unsigned n, const struct mrc_path *paths,
                         const uint16_t *slot, const uint32_t *ev, const uint8_t *op,
                         const uint8_t *flags, const uint8_t *ext, uint32_t psn0,
                         uint64_t va0, const uint8_t *payload, size_t payload_len,
                         size_t seg, uint32_t msn, uint32_t imm, uint32_t timestamp,
                         uint32_t *lens);

    struct mrc_batch {
        unsigned max;
        uint32_t bufsize;
        struct mmsghdr *msgs;
        struct iovec *iov;
        struct sockaddr_ll *addrs;
        uint8_t *bufs;
        uint32_t *lens;
        uint8_t *pkttype;
        int32_t *ifindex;
        uint32_t *idx;
    };
    void mrc_batch_init(struct mrc_batch *b);
    int mrc_send_batch(int fd, struct mrc_batch *b, const uint8_t *data, unsigned n);
    int mrc_send_slots(int fd, struct mrc_batch *b, unsigned n);
    int mrc_recv_batch(int fd, struct mrc_batch *b, unsigned n, int wait,
                       int skip_outgoing, unsigned *nrecv);

    #define MRC_OK                 0
    #define MRC_TRUNCATED          1
    #define MRC_BAD_ETHERTYPE      2
    #define MRC_BAD_IP_VERSION     3
    #define MRC_BAD_LENGTH         4
    #define MRC_BAD_NEXT_HEADER    5
    #define MRC_BAD_SRH            6
    #define MRC_BAD_UDP_PORT       7
    #define MRC_BAD_CHECKSUM       8
    #define MRC_BAD_ICRC           9
    #define MRC_BAD_OPCODE        10
    #define MRC_BAD_VERSION       11
    #define MRC_BAD_FIELD         12

    #define MRC_VERIFY_ICRC      1
    #define MRC_VERIFY_CHECKSUM  2

    struct mrc_parsed {
        int32_t  reason;
        const char *why;

        uint32_t end;
        uint32_t src_off;
        uint32_t srh_off;
        uint32_t inner_off;
        uint32_t udp_off;
        uint32_t payload_off;
        uint32_t payload_len;

        uint32_t outer_dscp, outer_ecn, outer_flow_label, outer_next_header;
        uint32_t outer_payload_length, outer_hop_limit;

        uint32_t srh_next_header, srh_segments_left, srh_last_entry, srh_flags, srh_tag;
        uint32_t srh_tlv_off, srh_tlv_len;

        uint32_t inner_dscp, inner_ecn, inner_flow_label, inner_next_header;
        uint32_t inner_payload_length, inner_hop_limit;

        uint32_t sport, dport, udp_length, udp_checksum;

        uint32_t opcode, dest_qp, psn, ack_req, rtx, ts, r, se, migreq, pad, tver, pkey;

        uint32_t ev;
        uint32_t ce;
        uint32_t trimmed;
        uint32_t is_data;

        uint64_t va;
        uint32_t rkey, length;
        uint32_t has_imm, msn, imm, has_tseth, timestamp;

        uint32_t has_seth, sack_ev, cack_psn;
        int32_t  ack_offset, sack_offset;
        uint32_t max_psn_range, mode, ece;
        uint64_t bitmap;
        uint32_t imm_credit, ts_echo, ooo_count, window_penalty, rcvd_bytes;

        uint32_t has_neth, nack_reason, nack_ev, nack_psn, nack_cack_psn, nack_ts_echo;

        uint32_t has_probe, probe_id, probe_ev, probe_psn, probe_timestamp;

        uint32_t has_endpoint, ep_op, ep_status, ep_request_id, ep_ev, ep_timestamp, ep_port_mask;
    };
    int mrc_parse(const uint8_t *buf, size_t len, struct mrc_parsed *out, int verify);
    """
)
# Newer headers mark their declarations for cffi (the part between the markers is
# plain declarations and #defines of integers: cdef takes it as written, comments and all).
for _header in ("spray.h", "tx.h"):
    ffibuilder.cdef(_cdef_of(CSRC / _header))
# mrcnet/_csrc/rx.h: the responder's receive lane (declarations read from the header)
ffibuilder.cdef(_cdef_of(CSRC / "rx.h"))
ffibuilder.set_source(
    "mrcnet._fastpath",
    '#include "fastpath.h"\n#include "spray.h"\n#include "tx.h"\n#include "rx.h"',
    sources=[str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC.relative_to(HERE))],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
