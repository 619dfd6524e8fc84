/* Private: a folder of rotating checkpoints, as kiln_model_fit keeps it. */
#ifndef KILN_RUNTIME_CHECKPOINT_H
#define KILN_RUNTIME_CHECKPOINT_H

#include "runtime/model.h"

/* Saves the training state as "<dir>/ckpt-<12-digit step>.safetensors"
 * (creating dir) and removes all but the `keep` newest checkpoints. */
kiln_status kiln_checkpoint_folder_save(kiln_model *m, const char *dir, int32_t keep);

/* Loads the newest checkpoint in dir that loads and returns 1, or 0 when
 * none does (none there is not an error: the first run of a job). */
int kiln_checkpoint_folder_resume(kiln_model *m, const char *dir);

#endif
