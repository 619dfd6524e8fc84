/* Fashion-MNIST for the examples: as Debian's dataset-fashion-mnist
 * package ships it (gzip-compressed IDX), or written by the tools as .npy
 * files or an image folder. */
#ifndef KILN_EXAMPLES_FASHION_DATA_H
#define KILN_EXAMPLES_FASHION_DATA_H

#include "kiln.h"

#define FASHION_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Where the samples come from (--data-format). */
typedef enum fashion_format {
    FASHION_IDX,      /* DIR/{train,t10k}-{images,labels}-*-ubyte.gz, as Debian ships them */
    FASHION_NPY,      /* DIR/{train,test}_{images,labels}.npy (tools/fashion_npy.py) */
    FASHION_FOLDER    /* DIR/{train,test}/<class>/<n>.png (tools/fashion_png_folder.py) */
} fashion_format;

/* "idx", "npy" or "folder"; -1 for anything else. */
int fashion_format_parse(const char *name);

/* Loads the training (`train` nonzero) or test split from `dir` in
 * `format`, at most `limit` samples (0: all; an image folder is read
 * whole: write fewer files instead), pixels scaled to [0, 1]. */
kiln_status fashion_load(kiln_context *ctx, fashion_format format, const char *dir, int train,
                         long limit, kiln_dataset **out);

/* Monotonic seconds. */
double fashion_seconds(void);

#endif
