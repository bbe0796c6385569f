/*
 * hp/rng.h — counter-based random numbers: a pure function of (key, counter), so any element of
 * any tensor can be generated independently (sharded initialisation gives the same values as
 * single-device initialisation) and runs are reproducible across thread counts.
 * Mixing function: SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014), applied to key ^ counter-derived state.
 */
#ifndef HP_RNG_H
#define HP_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 64 random bits for (key, counter). */
uint64_t hp_rng_u64(uint64_t key, uint64_t counter);
/* Uniform float in [0, 1) with 24 random bits. */
float hp_rng_uniform(uint64_t key, uint64_t counter);
/* Standard normal (Box-Muller on two uniforms drawn at counters 2c and 2c+1). */
float hp_rng_normal(uint64_t key, uint64_t counter);
/* 64-bit FNV-1a hash of a string, for keys derived from names ("blocks.3.attn.q.weight"). */
uint64_t hp_rng_hash(const char *s);

#ifdef __cplusplus
}
#endif
#endif
