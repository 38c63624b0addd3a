/*
 * rng.h — deterministic random numbers for the unit tests (xorshift64*):
 * the same sequence on every run and machine, so a failure reproduces.
 */
#ifndef LOOM_TESTS_RNG_H_
#define LOOM_TESTS_RNG_H_

#include <stdint.h>

static uint64_t rngState = 0x9e3779b97f4a7c15ull;

static inline uint64_t rngNext(void)
{
    rngState ^= rngState >> 12;
    rngState ^= rngState << 25;
    rngState ^= rngState >> 27;
    return rngState * 0x2545f4914f6cdd1dull;
}

#endif /* LOOM_TESTS_RNG_H_ */
