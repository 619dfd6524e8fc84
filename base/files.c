#include "base/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

/* This process's temporaries not yet renamed or removed (atomic). */
static long open_temporaries;

int kiln_create_temporary(const char *path, char *tmp, size_t size)
{
    static unsigned long counter;   /* atomic: two models may save at once */
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(tmp, size, "%s.tmp-%ld-%lu", path, (long)getpid(),
                 __atomic_fetch_add(&counter, 1UL, __ATOMIC_RELAXED));
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0)
            __atomic_fetch_add(&open_temporaries, 1L, __ATOMIC_ACQ_REL);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

void kiln_temporary_closed(void)
{
    __atomic_fetch_sub(&open_temporaries, 1L, __ATOMIC_ACQ_REL);
}

int kiln_temporary_pid(const char *name, size_t stem, long *pid)
{
    char *end;
    if (strlen(name) <= stem + 5 || strncmp(name + stem, ".tmp-", 5) != 0)
        return 0;
    const char *digits = name + stem + 5;
    if (*digits < '0' || *digits > '9')
        return 0;
    *pid = strtol(digits, &end, 10);
    if (end == digits || *end != '-' || end[1] < '0' || end[1] > '9')
        return 0;
    const char *n = end + 1;
    while (*n >= '0' && *n <= '9')
        n++;
    return *n == '\0';
}

int kiln_temporary_writer_gone(long pid)
{
    if (pid == (long)getpid())
        return __atomic_load_n(&open_temporaries, __ATOMIC_ACQUIRE) == 0;
    return pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

int kiln_remove_dead_temporaries(kiln_host *host, const char *path)
{
    char dir[PATH_MAX], file[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    snprintf(file, sizeof file, "%s", base);
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    const size_t stem = strlen(file);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        if (strncmp(e->d_name, file, stem) != 0 || !kiln_temporary_pid(e->d_name, stem, &pid) ||
            !kiln_temporary_writer_gone(pid))
            continue;
        char tmp[PATH_MAX + 256];
        struct stat s;
        snprintf(tmp, sizeof tmp, "%s/%s", dir, e->d_name);
        const long long bytes = stat(tmp, &s) == 0 ? (long long)s.st_size : 0;
        if (remove(tmp) != 0)
            continue;
        removed++;
        kiln_host_log(host, KILN_LOG_WARNING, "saving %s: removed %s (%lld bytes), left by an "
                      "unfinished save whose writer (process %ld) is gone", path, tmp, bytes,
                      pid);
    }
    closedir(d);
    return removed;
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
