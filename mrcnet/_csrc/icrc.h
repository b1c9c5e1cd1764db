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
/* Select the CRC code: 1 = PCLMULQDQ if the CPU has it, 0 = table (tests use both).
 * Returns 1 if PCLMULQDQ is now in use. */
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

/* ICRC of a frame being written (template.c): the variant fields of p[0:len] are masked
 * in place so one CRC pass covers the whole span, then put back, except the UDP
 * checksum, left masked (the caller overwrites it next). Returns zlib's value. */
uint32_t mrc_icrc_in_place(uint8_t *p, size_t len, int has_ip);
/* The same for a frame whose last n covered bytes are still to be copied from src: p[0:len]
 * is written, src[0:n] is copied to p + len while the CRC covers it, and the ICRC is that
 * of p[0:len + n] (template.c's data frames: the payload copy and its CRC in one pass). */
uint32_t mrc_icrc_in_place_copy(uint8_t *p, size_t len, const uint8_t *src, size_t n,
                                int has_ip);

#endif
