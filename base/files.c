#include "base/files.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

static int make_one(const char *path)
{
    struct stat s;
    if (mkdir(path, 0755) == 0)
        return 0;
    if (errno == EEXIST && stat(path, &s) == 0 && S_ISDIR(s.st_mode))
        return 0;
    if (errno == EEXIST)
        errno = ENOTDIR;
    return -1;
}

int kiln_make_dirs(const char *dir)
{
    char path[PATH_MAX];
    const size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(path, dir, n + 1);
    /* Each parent in turn; the first '/' of an absolute path is the root. */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/' || p[-1] == '/')
            continue;
        *p = '\0';
        const int failed = make_one(path);
        *p = '/';
        if (failed)
            return -1;
    }
    return make_one(path);
}
