/* Private: a flag one thread raises and others poll. volatile orders
 * nothing between threads; these are atomic with acquire/release order
 * (GCC and Clang builtins: kiln is C99, which has no <stdatomic.h>). */
#ifndef KILN_BASE_FLAG_H
#define KILN_BASE_FLAG_H

typedef struct kiln_flag {
    int raised;
} kiln_flag;

static inline void kiln_flag_raise(kiln_flag *f)
{
    __atomic_store_n(&f->raised, 1, __ATOMIC_RELEASE);
}

static inline void kiln_flag_lower(kiln_flag *f)
{
    __atomic_store_n(&f->raised, 0, __ATOMIC_RELEASE);
}

static inline int kiln_flag_up(const kiln_flag *f)
{
    return f && __atomic_load_n(&f->raised, __ATOMIC_ACQUIRE);
}

#endif
