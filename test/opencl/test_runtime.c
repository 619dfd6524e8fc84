/* Runtime pieces that need no training: the progress line, the program
 * binary cache (a corrupt entry is rebuilt, never trusted; two writers of
 * one entry at once are silent), RNG streams. */
#include "harness.h"
#include "opencl/cl_internal.h"
#include "opencl/device.h"
#include "runtime/context/context.h"
#include "runtime/train/progress.h"
#include "runtime/context/rng.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

static void test_progress_format(void)
{
    char line[512];
    kiln_progress_format(line, sizeof line, 1875, 1875, 14.2, 0.0072, 0.27123, 0.90312, NULL);
    const char *bar = "\xe2\x94\x81\xe2\x94\x81\xe2\x94\x81\xe2\x94\x81\xe2\x94\x81";
    char want[512];
    snprintf(want, sizeof want, "1875/1875 %s%s%s%s 14s 7ms/step - accuracy: 0.9031 - loss: "
             "0.2712", bar, bar, bar, bar);
    CHECK(strcmp(line, want) == 0);
    printf("%s\n", line);

    kiln_epoch_record v = {.struct_size = sizeof v};
    v.has_validation = 1;
    v.val_loss = 0.5;
    v.val_accuracy = -1;
    kiln_progress_format(line, sizeof line, 3, 10, 125, 2.6, 1.5, -1, &v);
    printf("%s\n", line);
    CHECK(strncmp(line, " 3/10 ", 6) == 0);
    CHECK(strstr(line, " 2:05 3s/step - loss: 1.5000 - val_loss: 0.5000") != NULL);
    CHECK(strstr(line, "accuracy") == NULL);
    /* Never overruns a short buffer. */
    char tiny[16];
    kiln_progress_format(tiny, sizeof tiny, 1, 2, 1, 1, 1, 1, &v);
    CHECK(strlen(tiny) < sizeof tiny);
}

static int count_entries(const char *dir, char *last, size_t size)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(last, size, "%s/%s", dir, e->d_name);
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

static int use_kernel(const char *cache_dir)
{
    kiln_context_options o = {.struct_size = sizeof o};
    o.cache_dir = cache_dir;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return 0;
    kiln_kernel *k = NULL;
    kiln_status st = kiln_kernel_get(ctx->devices[0], "optimizer", "kiln_optimizer_sgd", &k);
    if (st != KILN_OK)
        fprintf(stderr, "%s\n", kiln_context_last_error(ctx));
    kiln_context_destroy(ctx);
    return st == KILN_OK && k != NULL;
}

static void test_program_cache(void)
{
    char dir[] = "/tmp/kiln-cache-XXXXXX", entry[1200] = "", again[1200] = "";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    CHECK(use_kernel(dir));
    CHECK(count_entries(dir, entry, sizeof entry) == 1);
    CHECK(use_kernel(dir));  /* from the cache */
    CHECK(count_entries(dir, again, sizeof again) == 1 && strcmp(entry, again) == 0);

    /* Corrupt the binary: the entry is ignored, rebuilt and rewritten. */
    FILE *f = fopen(entry, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 100, SEEK_SET);
        fputs("garbage garbage garbage", f);
        fclose(f);
    }
    CHECK(use_kernel(dir));
    /* Truncated to its header. */
    CHECK(truncate(entry, 16) == 0);
    CHECK(use_kernel(dir));
    f = fopen(entry, "rb");
    long size = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
    }
    CHECK(size > 100);  /* rewritten whole */
    printf("program cache: %s, %ld bytes after repair\n", entry, size);
    remove(entry);
    rmdir(dir);
}

typedef struct cache_writer {
    kiln_host *host;
    const char *dir;
    const kiln_cache_key *key;
    const unsigned char *entry;
} cache_writer;

static void *store_many(void *arg)
{
    const cache_writer *w = arg;
    for (int i = 0; i < 200; i++)
        kiln_cache_store(w->host, w->dir, w->key, w->entry, 4096);
    return NULL;
}

static void count_warnings(void *user, kiln_log_level level, const char *message)
{
    (void)message;
    if (level <= KILN_LOG_WARNING)
        __atomic_add_fetch((int *)user, 1, __ATOMIC_RELAXED);
}

/* Replicas on identical devices store the same entry at once on a fresh
 * machine: neither may warn, and the entry must load. */
static void test_cache_writers_race(void)
{
    char dir[] = "/tmp/kiln-cache-race-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int warnings = 0;
    kiln_host host;
    CHECK(kiln_host_init(&host, NULL, NULL, count_warnings, &warnings, KILN_LOG_WARNING) ==
          KILN_OK);
    static unsigned char entry[4096];
    for (size_t i = 0; i < sizeof entry; i++)
        entry[i] = (unsigned char)(i * 7);
    const char *part = "race";
    const size_t length = 4;
    const kiln_cache_key key = kiln_cache_key_of(&part, &length, 1);
    const cache_writer w = {.host = &host, .dir = dir, .key = &key, .entry = entry};
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        pthread_create(&t[k], NULL, store_many, (void *)&w);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    CHECK(warnings == 0);
    unsigned char *loaded = NULL;
    size_t size = 0;
    kiln_cache_load(&host, dir, &key, &loaded, &size);
    CHECK(loaded && size == sizeof entry && memcmp(loaded, entry, size) == 0);
    kiln_host_free(&host, loaded);
    /* Nothing but the entry is left behind. */
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            char path[1200];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove(path);
            files++;
        }
    if (d)
        closedir(d);
    CHECK(files == 1);
    rmdir(dir);
    kiln_host_destroy(&host);
}

static void test_rng(void)
{
    kiln_rng a, b, c;
    kiln_rng_seed(&a, 42, 1);
    kiln_rng_seed(&b, 42, 1);
    kiln_rng_seed(&c, 42, 2);
    int same = 1, differs = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = kiln_rng_next(&a), y = kiln_rng_next(&b), z = kiln_rng_next(&c);
        same &= x == y;
        differs |= x != z;
    }
    CHECK(same && differs);
    int hist[7] = {0};
    double mean = 0;
    for (int i = 0; i < 70000; i++) {
        hist[kiln_rng_below(&a, 7)]++;
        float u = kiln_rng_uniform(&a);
        CHECK(u >= 0.0f && u < 1.0f);
        mean += u;
    }
    for (int i = 0; i < 7; i++)
        CHECK(hist[i] > 9500 && hist[i] < 10500);
    CHECK(fabs(mean / 70000 - 0.5) < 0.01);
}

int main(void)
{
    test_progress_format();
    test_rng();
    test_program_cache();
    test_cache_writers_race();
    return test_finish("test_runtime");
}
