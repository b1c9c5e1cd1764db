/* mrcnet C fast path: small, byte-identical to the Python reference in mrcnet.wire. */
#include <stdint.h>
#include <stddef.h>

/* Internet checksum (RFC 1071) of UDP over IPv6: pseudo-header (src, dst, length, next
 * header 17) plus the UDP header and payload. Returns the value to store (0 -> 0xffff). */
uint16_t mrc_udp6_checksum(const uint8_t *src, const uint8_t *dst,
                           const uint8_t *udp, size_t udp_len);
