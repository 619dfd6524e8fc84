/* Without libFuzzer: replays every file named on the command line (or found
 * in the folders named), then random mutations of them (bit flips, byte
 * changes, truncation, duplication) until the time budget in seconds
 * (FUZZ_SECONDS, default 5) runs out. A crash or sanitizer report fails the
 * test; the seed is printed so a failure can be replayed (FUZZ_SEED). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

typedef struct input {
    unsigned char *data;
    size_t size;
} input;

static input inputs[256];
static int n_inputs;

static void load(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char child[1024];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            load(child);
        }
        if (d)
            closedir(d);
        return;
    }
    FILE *f = fopen(path, "rb");
    if (!f || n_inputs == 256 || sb.st_size > (1 << 20)) {
        if (f)
            fclose(f);
        return;
    }
    input *in = &inputs[n_inputs];
    in->size = (size_t)sb.st_size;
    in->data = malloc(in->size + 1);
    if (in->data && fread(in->data, 1, in->size, f) == in->size)
        n_inputs++;
    fclose(f);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        load(argv[i]);
    for (int i = 0; i < n_inputs; i++)
        LLVMFuzzerTestOneInput(inputs[i].data, inputs[i].size);
    const char *budget = getenv("FUZZ_SECONDS"), *seed_env = getenv("FUZZ_SEED");
    const double seconds = budget ? atof(budget) : 5.0;
    const unsigned seed = seed_env ? (unsigned)atol(seed_env) : (unsigned)time(NULL);
    printf("fuzz driver: %d seed inputs, seed %u, %.0f s\n", n_inputs, seed, seconds);
    fflush(stdout);
    srand(seed);
    unsigned char buf[1 << 16];
    long runs = 0;
    const double end = now() + seconds;
    while (n_inputs && now() < end) {
        const input *in = &inputs[rand() % n_inputs];
        size_t size = in->size < sizeof buf ? in->size : sizeof buf;
        memcpy(buf, in->data, size);
        const int edits = 1 + rand() % 8;
        for (int e = 0; e < edits && size; e++) {
            const size_t at = (size_t)rand() % size;
            switch (rand() % 5) {
            case 0: buf[at] ^= (unsigned char)(1u << (rand() % 8)); break;
            case 1: buf[at] = (unsigned char)rand(); break;
            case 2: size = at; break;
            case 3:
                if (size * 2 <= sizeof buf) {
                    memcpy(buf + size, buf, size);
                    size *= 2;
                }
                break;
            default: buf[at] = (unsigned char)"{}[]\",:0123456789-e"[rand() % 19]; break;
            }
        }
        LLVMFuzzerTestOneInput(buf, size);
        runs++;
    }
    printf("fuzz driver: %ld mutated inputs, no crash\n", runs);
    for (int i = 0; i < n_inputs; i++)
        free(inputs[i].data);
    return 0;
}
