/* Program binaries on disk. An entry is a header (magic, key, size,
 * checksum) and the binary; anything that does not check out is ignored
 * and later overwritten. Writes go to a temporary file that is renamed. */
#include "base/files.h"
#include "opencl/cl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>   /* fchmod */
#include <unistd.h>

#define CACHE_MAGIC 0x314e4c4b45484341ULL  /* "ACHEKLN1" */
#define CACHE_MAX_BINARY (256u << 20)

typedef struct cache_header {
    uint64_t magic;
    uint64_t key[2];
    uint64_t size;
    uint64_t checksum;
} cache_header;

kiln_cache_key kiln_cache_key_of(const char *const *parts, const size_t *lengths, int n)
{
    kiln_cache_key k = {{KILN_HASH_SEED, 0x84222325cbf29ce4ULL}};
    for (int i = 0; i < n; i++) {
        /* Hash the length too, so ("ab","c") and ("a","bc") differ. */
        uint64_t len = lengths[i];
        for (int j = 0; j < 2; j++) {
            k.hash[j] = kiln_hash(k.hash[j], &len, sizeof len);
            k.hash[j] = kiln_hash(k.hash[j], parts[i], lengths[i]);
        }
        k.hash[1] = kiln_hash(k.hash[1], &k.hash[0], sizeof k.hash[0]);
    }
    return k;
}

static int entry_path(const char *dir, const kiln_cache_key *key, char *path, size_t size)
{
    int n = snprintf(path, size, "%s/%016llx%016llx.bin", dir,
                     (unsigned long long)key->hash[0], (unsigned long long)key->hash[1]);
    return n > 0 && (size_t)n < size;
}

void kiln_cache_load(kiln_host *host, const char *dir, const kiln_cache_key *key,
                     unsigned char **binary, size_t *size)
{
    char path[1200];
    *binary = NULL;
    if (!dir[0] || !entry_path(dir, key, path, sizeof path))
        return;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    cache_header h;
    unsigned char *data = NULL;
    if (fread(&h, sizeof h, 1, f) != 1 || h.magic != CACHE_MAGIC || h.key[0] != key->hash[0] ||
        h.key[1] != key->hash[1] || h.size == 0 || h.size > CACHE_MAX_BINARY)
        goto fail;
    data = kiln_host_alloc(host, (size_t)h.size);
    if (!data || fread(data, 1, (size_t)h.size, f) != h.size ||
        kiln_hash(KILN_HASH_SEED, data, (size_t)h.size) != h.checksum)
        goto fail;
    fclose(f);
    *binary = data;
    *size = (size_t)h.size;
    return;
fail:
    kiln_host_log(host, KILN_LOG_INFO, "program cache entry %s is invalid; rebuilding", path);
    kiln_host_free(host, data);
    fclose(f);
}

int kiln_cache_load_record(kiln_host *host, const char *dir, const kiln_cache_key *key,
                           void *out, size_t size)
{
    unsigned char *data = NULL;
    size_t got = 0;
    kiln_cache_load(host, dir, key, &data, &got);
    if (!data)
        return 0;
    const int ok = got == size;
    if (ok)
        memcpy(out, data, size);
    kiln_host_free(host, data);
    return ok;
}

void kiln_cache_store(kiln_host *host, const char *dir, const kiln_cache_key *key,
                      const unsigned char *binary, size_t size)
{
    char path[1200], tmp[1300];
    if (!dir[0] || !entry_path(dir, key, path, sizeof path))
        return;
    kiln_make_dirs(dir);   /* a failure surfaces when the entry is written */
    /* A name of this writer's own: replicas on identical devices build and
     * store the same entry at once, and the last rename simply wins. */
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    const int fd = mkstemp(tmp);
    if (fd >= 0)
        fchmod(fd, 0644);   /* mkstemp's 0600 would hide the entry from a shared cache */
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        kiln_host_log(host, KILN_LOG_WARNING, "cannot write program cache %s: %s", tmp,
                      strerror(errno));
        if (fd >= 0) {
            close(fd);
            remove(tmp);
        }
        return;
    }
    const cache_header h = {.magic = CACHE_MAGIC, .key = {key->hash[0], key->hash[1]},
                            .size = size, .checksum = kiln_hash(KILN_HASH_SEED, binary, size)};
    int ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(binary, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        kiln_host_log(host, KILN_LOG_WARNING, "cannot write program cache %s", path);
        remove(tmp);
    }
}
