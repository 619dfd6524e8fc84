/* Folder helpers shared by the program cache and the checkpoint folder. */
#ifndef KILN_BASE_FILES_H
#define KILN_BASE_FILES_H

/* Creates `dir` and every missing parent ("mkdir -p"). Returns 0, or -1
 * with errno set by the mkdir that failed (an existing folder is fine). */
int kiln_make_dirs(const char *dir);

#endif
