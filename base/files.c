#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int kiln_create_temporary(const char *path, char *tmp, size_t size)
{
    static unsigned long counter;   /* atomic: two models may save at once */
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(tmp, size, "%s.tmp-%ld-%lu", path, (long)getpid(),
                 __atomic_fetch_add(&counter, 1UL, __ATOMIC_RELAXED));
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

int kiln_write_all(int fd, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

void kiln_sync_folder_of(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    const int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}
