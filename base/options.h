/* Private: option structs that grow without breaking callers. Their first
 * field is struct_size: how much of the struct the caller knows. */
#ifndef KILN_BASE_OPTIONS_H
#define KILN_BASE_OPTIONS_H

#include <stddef.h>

/* Copies a caller's option struct (NULL: all zero) into `dst` of `size`
 * bytes, honouring the caller's struct_size: fields an older caller does
 * not know stay zero. */
void kiln_options_copy(void *dst, size_t size, const void *src);

/* The reverse, for structs kiln fills: copies no more of `src` (our `size`
 * bytes) than the caller's struct_size says its struct holds (0: all). */
void kiln_struct_export(void *dst, const void *src, size_t size);

#endif
