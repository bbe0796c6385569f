/* Counter-based random numbers (SplitMix64 finaliser over key and counter). */
#include "hp/rng.h"

#include <math.h>

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t hp_rng_u64(uint64_t key, uint64_t counter) {
    return mix(mix(key + 0x9e3779b97f4a7c15ull) ^ (counter * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
}

float hp_rng_uniform(uint64_t key, uint64_t counter) {
    return (float)(hp_rng_u64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

float hp_rng_normal(uint64_t key, uint64_t counter) {
    double u1 = ((double)(hp_rng_u64(key, 2 * counter) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(hp_rng_u64(key, 2 * counter + 1) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t hp_rng_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}
