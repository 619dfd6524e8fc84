/* The data of the sequence-label tests: N samples of T positions of F
 * features, a class of C per position, every third position of every
 * other sample padding (IGNORE, outside [0, C) as ignore_class may be). */
#ifndef KILN_TEST_SEQUENCE_DATA_H
#define KILN_TEST_SEQUENCE_DATA_H

#include <stdint.h>

#define T 5        /* positions per sample */
#define F 3        /* features per position */
#define C 4        /* classes */
#define N 24       /* samples */
#define IGNORE 7   /* padding: outside [0, C), as ignore_class may be */

static float features[N * T * F];
static int32_t labels[N * T];

/* Deterministic data: a class per position that the features hint at,
 * every third position of every other sample padding. */
static void make_data(void)
{
    uint32_t s = 12345;
    for (int i = 0; i < N * T; i++) {
        s = s * 1664525u + 1013904223u;
        labels[i] = (int32_t)((s >> 16) % C);
        for (int f = 0; f < F; f++) {
            s = s * 1664525u + 1013904223u;
            features[i * F + f] = (float)((double)(s >> 8) / 16777216.0 - 0.5) +
                                  (f == labels[i] % F ? 0.7f : 0.0f);
        }
        if ((i / T) % 2 == 1 && (i % T) % 3 == 0)
            labels[i] = IGNORE;
    }
}

#endif
