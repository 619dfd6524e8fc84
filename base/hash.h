/* Private: 64-bit FNV-1a, for cache keys and model fingerprints, never
 * security. */
#ifndef KILN_BASE_HASH_H
#define KILN_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KILN_HASH_SEED 0xcbf29ce484222325ULL

/* The hash of n bytes, continuing from h (start from KILN_HASH_SEED). */
uint64_t kiln_hash(uint64_t h, const void *data, size_t n);

#endif
