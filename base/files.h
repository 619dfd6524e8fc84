/* File and folder helpers shared by the program cache, the checkpoint
 * folder and the files kiln writes atomically (safetensors, ONNX). */
#ifndef KILN_BASE_FILES_H
#define KILN_BASE_FILES_H

#include "base/host.h"

#include <stddef.h>

/* Creates `dir` and every missing parent ("mkdir -p"). Returns 0, or -1
 * with errno set by the mkdir that failed (an existing folder is fine). */
int kiln_make_dirs(const char *dir);

/* Creates "<path>.tmp-<pid>-<n>" for writing, exclusively, its name into
 * tmp[size]: the process id tells a later save whose writer is gone
 * (kiln_remove_dead_temporaries). A name already taken (left by a killed
 * process whose id this one reuses) moves on to the next n. Returns the
 * descriptor, or -1 with errno set. Once the temporary is renamed or
 * removed, call kiln_temporary_closed. */
int kiln_create_temporary(const char *path, char *tmp, size_t size);

/* A temporary from kiln_create_temporary is gone (renamed or removed). */
void kiln_temporary_closed(void);

/* Whether `name` is a temporary of the file whose name is its first `stem`
 * characters ("<stem>.tmp-<pid>-<n>"), and which process wrote it. */
int kiln_temporary_pid(const char *name, size_t stem, long *pid);

/* Whether the writer of a temporary, process `pid`, is gone: no such
 * process, or this one while none of its own temporaries is open (a
 * container restart can give the killed writer's id to its successor). */
int kiln_temporary_writer_gone(long pid);

/* A save killed mid-write leaves its temporary behind, and nothing else
 * removes it: on a small disk one leftover makes every later save fail.
 * Removes the temporaries of `path` whose writer is gone, a warning through
 * `host`'s log for each; returns how many. Best effort: one that cannot be
 * removed stays, unreported. */
int kiln_remove_dead_temporaries(kiln_host *host, const char *path);

/* Writes n bytes to fd, going on after EINTR. Returns 1, or 0 with errno. */
int kiln_write_all(int fd, const void *data, size_t n);

/* fsyncs the folder holding `path`, so that a rename into it survives a
 * crash. Best effort: nothing is reported. */
void kiln_sync_folder_of(const char *path);

#endif
