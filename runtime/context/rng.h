/* Private: the deterministic random generator behind weights and shuffling
 * (xoshiro256** seeded through splitmix64). Same seed, same stream, on
 * every platform. */
#ifndef KILN_RUNTIME_CONTEXT_RNG_H
#define KILN_RUNTIME_CONTEXT_RNG_H

#include <stdint.h>

typedef struct kiln_rng {
    uint64_t s[4];
} kiln_rng;

/* Seeds from (seed, stream): independent streams for weights, each epoch's
 * shuffle, dropout... */
void kiln_rng_seed(kiln_rng *rng, uint64_t seed, uint64_t stream);
uint64_t kiln_rng_next(kiln_rng *rng);
/* Uniform in [0, 1) with 24 random bits. */
float kiln_rng_uniform(kiln_rng *rng);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t kiln_rng_below(kiln_rng *rng, uint64_t n);

#endif
