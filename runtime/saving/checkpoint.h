/* Private: a folder of rotating checkpoints, as kiln_model_fit keeps it. */
#ifndef KILN_RUNTIME_SAVING_CHECKPOINT_H
#define KILN_RUNTIME_SAVING_CHECKPOINT_H

#include "runtime/model/model.h"

/* kiln_model_save_checkpoint and kiln_model_load_checkpoint for a caller
 * already inside the model (kiln_model_enter): fit's checkpoint folders. */
kiln_status kiln_checkpoint_save(kiln_model *m, const char *path);
/* kiln_model_save_weights for the same callers (fit's ModelCheckpoint). */
kiln_status kiln_checkpoint_save_weights(kiln_model *m, const char *path);
kiln_status kiln_checkpoint_load(kiln_model *m, const char *path);
/* kiln_model_save for a caller inside the model: the weights and the
 * model's description (runtime/model_file.h); `adapters`: LoRA's adapters
 * kept apart (kiln_save_options.keep_lora_adapters), else merged. */
kiln_status kiln_checkpoint_save_model(kiln_model *m, const char *path, int adapters);

/* Prepares fit's checkpoint folder: creates it with its parents, and
 * removes the temporary files of saves that were killed (logged). */
kiln_status kiln_checkpoint_folder_open(kiln_model *m, const char *dir);

/* Saves the training state as "<dir>/ckpt-<12-digit step>.safetensors"
 * (creating dir) and removes all but the `keep` newest checkpoints and any
 * temporary file of an older or abandoned save. */
kiln_status kiln_checkpoint_folder_save(kiln_model *m, const char *dir, int32_t keep);

/* Loads the newest checkpoint in dir that loads and returns 1, or 0 when
 * none does (none there is not an error: the first run of a job). */
int kiln_checkpoint_folder_resume(kiln_model *m, const char *dir);

#endif
