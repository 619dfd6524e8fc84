/* fit's checkpoint folder: created with its parents, files named as kiln.h
 * says, and the temporary files of killed saves removed so that they never
 * fill the disk. Killed writers run before this process touches OpenCL
 * (fork and a driver's threads do not mix). */
#include "harness.h"
#include "runtime/context/context.h"
#include "runtime/formats/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mount.h>
#endif

static char root[64];
static char small[128];      /* a 2 MiB tmpfs when the test may mount one */
static int small_mounted;

static int count_files(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, needle) != NULL;
    if (d)
        closedir(d);
    return n;
}

/* Children save 256 KiB files named like checkpoints through the writer fit
 * uses and are killed at random moments, until three saves were cut short.
 * The complete files are then removed: only the leftovers stay. */
static int make_leftovers(const char *dir)
{
    kiln_context host;
    kiln_context_init_host_only(&host, NULL, NULL, NULL);
    enum { floats = 1 << 16 };
    static float data[floats];
    srand((unsigned)time(NULL));
    int kills = 0;
    while (count_files(dir, ".tmp-") < 3 && kills < 200) {
        const pid_t child = fork();
        if (child == 0) {
            for (int step = 1;; step++) {
                char path[256];
                snprintf(path, sizeof path, "%s/ckpt-%012d.safetensors", dir, step);
                kiln_st_entry e = {.name = "w", .rank = 1, .shape = {floats}, .data = data};
                kiln_st_write(&host, path, &e, 1, NULL, NULL, 0);
            }
        }
        struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)(rand() % 20000000)};
        nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        kills++;
    }
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && !strstr(e->d_name, ".tmp-"))
            remove(path);
    }
    if (d)
        closedir(d);
    kiln_context_release_host_only(&host);
    return kills;
}

/* A temporary of a writer that still runs (the test runner, our parent) for
 * a step after any this test reaches: fit must leave it alone. */
static void add_live_writer_temporary(const char *dir, char *path, size_t size)
{
    snprintf(path, size, "%s/ckpt-999999999999.safetensors.tmp-%ld-0", dir, (long)getppid());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f)
        fclose(f);
}

/* Fills the rest of the filesystem with a leftover whose writer is gone (a
 * child that has exited), so not even one checkpoint fits any more. */
static void fill_with_dead_writer_temporary(const char *dir)
{
    const pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/ckpt-000000000001.safetensors.tmp-%ld-0", dir, (long)child);
    FILE *f = fopen(path, "wb");
    static char block[4096];
    while (f && fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
        continue;
    if (f)
        fclose(f);
}

static kiln_model *small_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {12};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 16,
                                 .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .kind = KILN_OPTIMIZER_ADAM,
                                         .learning_rate = 0.01f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_dataset *small_data(kiln_context *ctx)
{
    static float x[40 * 12];
    static int32_t y[40];
    for (int i = 0; i < 40 * 12; i++)
        x[i] = (float)((i * 29) % 53) / 53.0f;
    for (int i = 0; i < 40; i++)
        y[i] = i % 3;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 40, .feature_rank = 1,
                          .feature_dims = {12}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

static kiln_status fit_into(kiln_context *ctx, const char *dir, int resume)
{
    kiln_model *m = small_model(ctx);
    kiln_dataset *ds = small_data(ctx);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 10;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.checkpoint_dir = dir;
    fo.checkpoint_every_steps = 3;
    fo.resume = resume;
    const kiln_status st = kiln_model_fit(m, ds, &fo);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    return st;
}

/* "created with its parents", and the names kiln.h gives. */
static void test_nested_folder(kiln_context *ctx)
{
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "%s/runs/a/b", root);
    CHECK_OK(ctx, fit_into(ctx, dir, 0));
    /* 2 epochs of 4 steps, every 3 steps: steps 3 and 6. */
    snprintf(path, sizeof path, "%s/ckpt-000000000006.safetensors", dir);
    CHECK(access(path, R_OK) == 0);
    CHECK(count_files(dir, ".safetensors") == 2);
    /* A file where a parent should be is a clear error. */
    snprintf(path, sizeof path, "%s/runs/a/b/ckpt-000000000003.safetensors/c", root);
    CHECK_FAILS(ctx, KILN_ERROR_IO, "cannot create checkpoint folder", fit_into(ctx, path, 0));
}

static void test_leftovers(kiln_context *ctx, const char *dir, int kills)
{
    const int leftovers = count_files(dir, ".tmp-");
    char live[512];
    add_live_writer_temporary(dir, live, sizeof live);
    fill_with_dead_writer_temporary(dir);
    printf("%d killed saves left %d temporaries in %s%s\n", kills, leftovers, dir,
           small_mounted ? ", a 2 MiB tmpfs now full" : "");
    CHECK(leftovers >= 3);
    /* Resuming finds no checkpoint, removes the leftovers and saves. */
    CHECK_OK(ctx, fit_into(ctx, dir, 1));
    CHECK(count_files(dir, ".tmp-") == 1);
    CHECK(access(live, F_OK) == 0);
    CHECK(count_files(dir, ".safetensors") == 2 + 1);
    remove(live);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/kiln-ckfolder-XXXXXX");
    if (!mkdtemp(root))
        return 1;
    snprintf(small, sizeof small, "%s/small", root);
    mkdir(small, 0755);
#ifdef __linux__
    small_mounted = mount("tmpfs", small, "tmpfs", 0, "size=2m") == 0;
    if (!small_mounted)
        printf("not checked on a full disk: cannot mount a tmpfs here (%s)\n", strerror(errno));
#endif
    const int kills = make_leftovers(small);
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_nested_folder(ctx);
    test_leftovers(ctx, small, kills);
    kiln_context_destroy(ctx);
#ifdef __linux__
    if (small_mounted)
        umount2(small, MNT_DETACH);
#endif
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return test_finish("test_checkpoint_folder");
}
