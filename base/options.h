/* Private: option structs that grow without breaking callers. Their first
 * field is struct_size: how much of the struct the caller knows. */
#ifndef KILN_BASE_OPTIONS_H
#define KILN_BASE_OPTIONS_H

#include "base/host.h"

#include <stddef.h>

/* Copies a caller's option struct (NULL: all zero) into `dst` of `size`
 * bytes, honouring the caller's struct_size: fields an older caller does
 * not know stay zero. Refuses a struct_size that is nonzero and below
 * `least` bytes, the end of the fields the call cannot default (never
 * below sizeof(size_t), which cannot even hold struct_size): `dst` is then
 * left zero and `why` says so ("<name>.struct_size is ..."; the caller
 * prefixes its call). */
kiln_status kiln_options_take(void *dst, size_t size, const void *src, size_t least,
                              const char *name, kiln_diag *why);

/* The same for element `index` of a caller's array of option structs
 * (kiln_output_loss, kiln_input_array, ...), whose struct_size is also the
 * distance between elements: element 0's says it (0: `size`), and another
 * element's must be 0 or the same. `name` is the struct's. */
kiln_status kiln_options_take_at(void *dst, size_t size, const void *array, size_t index,
                                 size_t least, const char *name, kiln_diag *why);

/* The reverse, for structs kiln fills: copies no more of `src` (our `size`
 * bytes) than the caller's struct_size says its struct holds (0: all). */
void kiln_struct_export(void *dst, const void *src, size_t size);

#endif
