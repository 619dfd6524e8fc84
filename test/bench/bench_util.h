/* What the benchmark programs share: a monotonic clock and the parsing of
 * an integer option. */
#ifndef KILN_BENCH_UTIL_H
#define KILN_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* s as an integer in [min, max] into *out; 0, after a message naming
 * `program` and `opt`, when it is missing or not one. */
static inline int bench_parse_long(const char *program, const char *opt, const char *s,
                                   long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    const long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "%s: %s needs an integer in [%ld, %ld]\n", program, opt, min, max);
        return 0;
    }
    *out = v;
    return 1;
}

#endif
