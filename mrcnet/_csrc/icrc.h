/* mrcnet C: the RoCEv2 invariant CRC (icrc.c) and the CRC-32 it runs on (crc32.c), the
 * twins of mrcnet/wire/icrc.py (whose Python file also binds them). */
#ifndef MRCNET_ICRC_H
#define MRCNET_ICRC_H

#include <stdint.h>
#include <stddef.h>

/* cffi: begin */
/* CRC-32 as zlib's crc32() computes it (crc32.c: PCLMULQDQ folding when the CPU has it,
 * else a slicing-by-8 table). mrc_crc32_raw works on the uninverted state:
 * mrc_crc32(c, p, n) == ~mrc_crc32_raw(~c, p, n). */
uint32_t mrc_crc32(uint32_t crc, const uint8_t *p, size_t n);
uint32_t mrc_crc32_raw(uint32_t c, const uint8_t *p, size_t n);
/* Copy n bytes from src to dst (not overlapping) and return the CRC-32 of them, as
 * mrc_crc32(crc, dst, n) after the copy would: one pass over the bytes, where the copy and
 * then the CRC were two (the data frames' payload). The _raw form on the uninverted
 * state, as above. Twin: a copy and zlib.crc32 (tests/wire/test_crc_copy.py). */
uint32_t mrc_crc32_copy(uint32_t crc, uint8_t *dst, const uint8_t *src, size_t n);
uint32_t mrc_crc32_copy_raw(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n);
/* Select the CRC code: the best the CPU has up to `want`: 2 = VPCLMULQDQ (AVX-512) for
 * 256 bytes and more, 1 = PCLMULQDQ, 0 = the table (the default is 2; tests use each).
 * Returns the code now in use. */
int mrc_crc32_impl(int want);

/* RoCEv2 invariant CRC: CRC-32 (zlib's) of 8 bytes of 0xff, then `len` bytes from `p`
 * (up to but not including the ICRC) with the fields that change in flight taken as all
 * ones. With has_ip, `p` is the inner IPv6 header (traffic class, flow label and hop limit
 * masked), else the UDP header; then the UDP checksum and the BTH reserved byte are
 * masked. Returns zlib's value (the reference stores it little-endian), or 0 if `len`
 * cannot hold the headers. Mirrors mrcnet/wire/icrc.py. */
uint32_t mrc_icrc(const uint8_t *p, size_t len, int has_ip);
/* cffi: end */

/* The raw CRC-32 state c moved over first[0:64] and then p[64:n] (n >= 64): p[0:n] with
 * its first 64 bytes read from `first` instead (mrc_icrc's masked copy of the headers), in
 * one PCLMULQDQ fold where the headers' bytes alone are too few for one. */
uint32_t mrc_crc32_first_raw(uint32_t c, const uint8_t *first, const uint8_t *p, size_t n);

/* mrc_crc32_copy_raw and mrc_crc32_first_raw that also add to *sum the bytes' part of the
 * UDP checksum (mrc_sum_part, checksum.h): of src[0:n], and of p[64:n]. One pass over the
 * bytes serves both sums (with VPCLMULQDQ; two passes otherwise). The bytes must start at
 * an even offset of the UDP datagram for the part to be the datagram's. A NULL dst copies
 * nothing: the CRC and the sum of src[0:n] where it lies (a payload sent from its own
 * buffer, mrc_patch_run's gather). */
uint32_t mrc_crc32_copy_sum_raw(uint32_t c, uint8_t *dst, const uint8_t *src, size_t n,
                                uint64_t *sum);
uint32_t mrc_crc32_first_sum_raw(uint32_t c, const uint8_t *first, const uint8_t *p, size_t n,
                                 uint64_t *sum);

/* ICRC of a frame being written (template.c): the variant fields of p[0:len] are masked
 * in place so one CRC pass covers the whole span, then put back, except the UDP
 * checksum, left masked (the caller overwrites it next). Returns zlib's value. */
uint32_t mrc_icrc_in_place(uint8_t *p, size_t len, int has_ip);
/* The same for a frame whose last n covered bytes are still to be copied from src: p[0:len]
 * is written, src[0:n] is copied to p + len while the CRC covers it, and the ICRC is that
 * of p[0:len + n] (template.c's data frames: the payload copy and its CRC in one pass). */
uint32_t mrc_icrc_in_place_copy(uint8_t *p, size_t len, const uint8_t *src, size_t n,
                                int has_ip);
/* The same, adding src[0:n]'s part of the UDP checksum to *sum (mrc_sum_part): the data
 * frames' payload is read once for the copy and both sums. With copy 0, src[0:n] is not
 * copied (the frame's payload goes to the socket from src itself): the ICRC is that of
 * p[0:len] followed by src[0:n]. */
uint32_t mrc_icrc_in_place_copy_sum(uint8_t *p, size_t len, const uint8_t *src, size_t n,
                                    int has_ip, uint64_t *sum, int copy);
/* mrc_icrc of a frame of 64 covered bytes or more that also adds p[64:len]'s part of the
 * UDP checksum to *sum (the receive check: one pass over the payload for both sums). */
uint32_t mrc_icrc_sum(const uint8_t *p, size_t len, int has_ip, uint64_t *sum);

#endif
