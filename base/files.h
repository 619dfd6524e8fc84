/* File and folder helpers shared by the program cache, the checkpoint
 * folder and the files kiln writes atomically (safetensors, ONNX). */
#ifndef KILN_BASE_FILES_H
#define KILN_BASE_FILES_H

#include <stddef.h>

/* Creates `dir` and every missing parent ("mkdir -p"). Returns 0, or -1
 * with errno set by the mkdir that failed (an existing folder is fine). */
int kiln_make_dirs(const char *dir);

/* Creates "<path>.tmp-<pid>-<n>" for writing, exclusively, its name into
 * tmp[size]: the process id tells a later fit whose writer is gone
 * (kiln_checkpoint_folder_open). A name already taken (left by a killed
 * process whose id this one reuses) moves on to the next n. Returns the
 * descriptor, or -1 with errno set. */
int kiln_create_temporary(const char *path, char *tmp, size_t size);

/* Writes n bytes to fd, going on after EINTR. Returns 1, or 0 with errno. */
int kiln_write_all(int fd, const void *data, size_t n);

/* fsyncs the folder holding `path`, so that a rename into it survives a
 * crash. Best effort: nothing is reported. */
void kiln_sync_folder_of(const char *path);

#endif
