/* mrcnet C: the Internet checksum of UDP over IPv6 (checksum.c), the twin of
 * mrcnet/wire/checksum.py (whose Python file also binds these functions). */
#ifndef MRCNET_CHECKSUM_H
#define MRCNET_CHECKSUM_H

#include <stdint.h>
#include <stddef.h>

/* cffi_build.py gives cffi the declarations between these markers. */
/* cffi: begin */
/* Internet checksum (RFC 1071) of UDP over IPv6: pseudo-header (src, dst, length, next
 * header 17) plus the UDP header and payload, with the checksum field taken as is (the
 * caller zeroes it to compute, or leaves it to verify). Returns the value to store
 * (a computed 0 is sent as 0xffff, RFC 8200 section 8.1). */
uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                           const uint8_t *udp, size_t udp_len);

/* One's-complement sum of the pseudo-header and UDP datagram, folded to 16 bits
 * (0xffff for a datagram whose stored checksum is right). */
uint16_t mrc_udp6_sum(const uint8_t *src, const uint8_t *dst,
                      const uint8_t *udp, size_t udp_len);

/* UDP checksum sums with AVX2 when want and the CPU has it (else the scalar loop);
 * returns whether AVX2 is now used. On by default; tests compare the two. */
int mrc_sum_impl(int want);

/* Folded sum of the pseudo-header addresses, for mrc_tmpl.pseudo_sum (template.h) and
 * the other per-path templates. */
uint32_t mrc_tmpl_addr_sum(const uint8_t *src, const uint8_t *dst);
/* cffi: end */

/* For the frame writers (template.c): the one's-complement sum of a UDP datagram given
 * its pseudo-header addresses' folded sum (mrc_tmpl_addr_sum), before inversion. */
uint16_t mrc_udp6_sum_addrs(uint32_t addrs, const uint8_t *udp, size_t udp_len);

/* A part of a datagram's one's-complement sum: the 32-bit words of p[0:n] in native byte
 * order (an odd last byte padded with a zero) added into 64 bits, not yet folded. The
 * parts of a datagram add up to its sum when each starts at an even offset in it (RFC
 * 1071 section 2): the CRC's pass sums the payload it copies or reads this way
 * (crc32.c), so the checksum needs no pass of its own over it. */
uint64_t mrc_sum_part(const uint8_t *p, size_t n);
/* mrc_udp6_sum_addrs of a datagram of udp_len bytes whose parts sum to `part`. */
uint16_t mrc_udp6_sum_part(uint32_t addrs, uint64_t part, size_t udp_len);

#endif
