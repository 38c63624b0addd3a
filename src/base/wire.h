/*
 * wire.h — big-endian integers in byte buffers, for every message Loom puts
 * on a wire (bootstrap frames, unique ids, network connection records).
 *
 * Messages cross hosts that may differ in byte order and compiler, so they
 * are coded byte by byte, never by copying a struct.
 */
#ifndef LOOM_WIRE_H_
#define LOOM_WIRE_H_

#include <stdint.h>

static inline void wirePut16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void wirePut32(uint8_t *p, uint32_t v)
{
    wirePut16(p, (uint16_t)(v >> 16));
    wirePut16(p + 2, (uint16_t)v);
}

static inline void wirePut64(uint8_t *p, uint64_t v)
{
    wirePut32(p, (uint32_t)(v >> 32));
    wirePut32(p + 4, (uint32_t)v);
}

static inline uint16_t wireGet16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t wireGet32(const uint8_t *p)
{
    return ((uint32_t)wireGet16(p) << 16) | wireGet16(p + 2);
}

static inline uint64_t wireGet64(const uint8_t *p)
{
    return ((uint64_t)wireGet32(p) << 32) | wireGet32(p + 4);
}

#endif /* LOOM_WIRE_H_ */
