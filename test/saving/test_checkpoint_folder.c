/* fit's checkpoint folder: created with its parents, files named as kiln.h
 * says, and the temporary files of killed saves removed so that they never
 * fill the disk; so are those of a killed kiln_model_save, ONNX export or
 * ModelCheckpoint, at the next write to the same path. Killed writers run
 * before this process touches OpenCL (fork and a driver's threads do not
 * mix). */
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

/* kiln_model_save, kiln_model_export_onnx and the ModelCheckpoint callback,
 * each killed mid-write in a loop: children build a model of 16.8 MB
 * (1024 -> 2048 -> 1024, as in the report that found the leftovers) on
 * their own context, say so through a pipe, and save, export or fit with
 * a ModelCheckpoint in a loop until they are killed at a random moment. */
enum { SAVE, EXPORT, CALLBACK, N_WRITERS };
static const char *writer_name[N_WRITERS] = {"kiln_model_save", "kiln_model_export_onnx",
                                             "ModelCheckpoint"};
static const char *writer_file[N_WRITERS] = {"model.safetensors", "model.onnx",
                                             "callback.safetensors"};
static char writers_dir[128];

static kiln_model *big_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {1024};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 2048,
                                 .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 1024,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &sgd};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_dataset *big_data(kiln_context *ctx)
{
    static float x[2 * 1024];
    static int32_t y[2] = {3, 7};
    for (int i = 0; i < 2 * 1024; i++)
        x[i] = (float)(i % 11) / 11.0f;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 2, .feature_rank = 1,
                          .feature_dims = {1024}, .features = x, .sparse_labels = y,
                          .num_classes = 1024};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

static void writer_path(int kind, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", writers_dir, writer_file[kind]);
}

/* ModelCheckpoint saves at every epoch's end; an epoch is one step. */
static kiln_status fit_with_checkpoint(kiln_context *ctx, kiln_model *m, int32_t epochs)
{
    char path[256];
    writer_path(CALLBACK, path, sizeof path);
    kiln_dataset *ds = big_data(ctx);
    const kiln_callback_spec cb = {.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = path};
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 2;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.callbacks = &cb;
    fo.n_callbacks = 1;
    const kiln_status st = kiln_model_fit(m, ds, &fo);
    kiln_dataset_destroy(ds);
    return st;
}

static void run_writer(int kind, int ready)
{
    kiln_context *ctx = test_context(5);
    kiln_model *m = ctx ? big_model(ctx) : NULL;
    char path[256];
    writer_path(kind, path, sizeof path);
    if (!m || write(ready, "r", 1) != 1)
        _exit(1);
    for (;;) {
        const kiln_status st = kind == SAVE     ? kiln_model_save(m, path)
                               : kind == EXPORT ? kiln_model_export_onnx(m, path)
                                                : fit_with_checkpoint(ctx, m, 1000);
        if (st != KILN_OK)
            _exit(2);
    }
}

static int count_temporaries(int kind)
{
    char needle[64];
    snprintf(needle, sizeof needle, "%s.tmp-", writer_file[kind]);
    return count_files(writers_dir, needle);
}

/* Until a killed writer of each kind left a temporary (at most 40 kills
 * each): without a cleanup, every kill mid-write leaves one, and they pile
 * up; with it, each writer's save removes those its killed predecessors
 * left, so some stay only after the last kill. Returns the kills. */
static int kill_writers(int kind)
{
    int kills = 0;
    /* A save of the 16.8 MB model takes tens of milliseconds here; fit
     * starts its loader before the first epoch's step and save. On a busy
     * machine starting takes longer: the window grows by half every 5 kills
     * that left nothing. */
    long most = kind == CALLBACK ? 500000000 : 150000000;
    while (kills < 40 && count_temporaries(kind) == 0) {
        if (kills > 0 && kills % 5 == 0)
            most = most / 2 * 3;
        int pipe_fd[2];
        if (pipe(pipe_fd) != 0)
            break;
        const pid_t child = fork();
        if (child == 0) {
            close(pipe_fd[0]);
            run_writer(kind, pipe_fd[1]);
        }
        close(pipe_fd[1]);
        char c;
        const int ready = read(pipe_fd[0], &c, 1) == 1;
        close(pipe_fd[0]);
        const long pause_ns = rand() % most;
        struct timespec pause = {.tv_sec = pause_ns / 1000000000, .tv_nsec = pause_ns % 1000000000};
        if (ready)
            nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        kills++;
    }
    return kills;
}

/* Counts the warnings the cleanup logs. */
static void count_log(void *user, kiln_log_level level, const char *message)
{
    if (level == KILN_LOG_WARNING && strstr(message, "left by an unfinished save"))
        ++*(int *)user;
}

/* The temporaries of a writer that still runs (the test runner, our
 * parent) stay; those of this very process, with none of its saves under
 * way, are a killed predecessor's that had the same process id (a
 * container restart). */
static void add_writer_temporaries(int kind, char *live, size_t size)
{
    char path[256], own[320];
    writer_path(kind, path, sizeof path);
    snprintf(live, size, "%s.tmp-%ld-0", path, (long)getppid());
    snprintf(own, sizeof own, "%s.tmp-%ld-999", path, (long)getpid());
    FILE *f = fopen(live, "wb"), *g = fopen(own, "wb");
    CHECK(f && g);
    if (f)
        fclose(f);
    if (g)
        fclose(g);
}

/* After the kills: the next save, export or fit to each path removes the
 * leftovers of the dead writers (a warning each), leaves the live writer's,
 * and writes a file that loads. */
static void test_killed_writers(const int *kills)
{
    int warnings = 0;
    kiln_context_options o = {.struct_size = sizeof o, .seed = 5, .log_fn = count_log,
                              .log_user = &warnings, .log_level = KILN_LOG_WARNING};
    kiln_context *ctx = NULL;
    CHECK_OK(ctx, kiln_context_create(&o, &ctx));
    kiln_model *m = big_model(ctx);
    for (int kind = 0; kind < N_WRITERS; kind++) {
        char path[256], live[320];
        writer_path(kind, path, sizeof path);
        const int left = count_temporaries(kind);
        add_writer_temporaries(kind, live, sizeof live);
        warnings = 0;
        const kiln_status st = kind == SAVE     ? kiln_model_save(m, path)
                               : kind == EXPORT ? kiln_model_export_onnx(m, path)
                                                : fit_with_checkpoint(ctx, m, 1);
        if (kind == EXPORT && st == KILN_ERROR_UNSUPPORTED) {
            printf("%s: not checked, kiln was built without ONNX\n", writer_name[kind]);
            remove(live);
            continue;
        }
        CHECK_OK(ctx, st);
        printf("%s: %d kills left %d temporaries; the next write removed %d\n",
               writer_name[kind], kills[kind], left, warnings - 1);
        CHECK(left >= 1);
        CHECK(warnings == left + 1);   /* the leftovers, and this process's */
        CHECK(count_temporaries(kind) == 1 && access(live, F_OK) == 0);
        remove(live);
        if (kind == EXPORT) {   /* the same bytes as a fresh export */
            char fresh[320];
            snprintf(fresh, sizeof fresh, "%s/fresh.onnx", writers_dir);
            CHECK_OK(ctx, kiln_model_export_onnx(m, fresh));
            size_t a = 0, b = 0;
            unsigned char *got = test_read_file(path, &a), *want = test_read_file(fresh, &b);
            CHECK(got && want && a == b && memcmp(got, want, a) == 0);
            free(got);
            free(want);
            continue;
        }
        kiln_model *loaded = NULL;
        CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
        kiln_model_destroy(loaded);
    }
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
}

/* On a disk that holds one model file and a half, a dead writer's
 * leftover of the rest used to make every later save fail (ENOSPC). */
static void test_full_disk_save(void)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/tight", root);
    mkdir(dir, 0755);
#ifdef __linux__
    if (mount("tmpfs", dir, "tmpfs", 0, "size=26m") != 0) {
        printf("kiln_model_save not checked on a full disk: cannot mount a tmpfs here (%s)\n",
               strerror(errno));
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    char leftover[320];
    snprintf(leftover, sizeof leftover, "%s.tmp-%ld-0", path, (long)child);
    FILE *f = fopen(leftover, "wb");
    static char block[1 << 16];
    while (f && fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
        continue;
    if (f)
        fclose(f);
    kiln_context *ctx = test_context(5);
    kiln_model *m = big_model(ctx);
    CHECK_OK(ctx, kiln_model_save(m, path));
    const int removed = access(leftover, F_OK) != 0;
    CHECK(removed);
    kiln_model *loaded = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
    kiln_model_destroy(loaded);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    printf("kiln_model_save on a 26 MiB tmpfs a dead writer's leftover filled: %s\n",
           removed ? "removed, saved" : "not removed");
    umount2(dir, MNT_DETACH);
#else
    printf("kiln_model_save not checked on a full disk: no tmpfs here\n");
#endif
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
    snprintf(writers_dir, sizeof writers_dir, "%s/writers", root);
    mkdir(writers_dir, 0755);
    int writer_kills[N_WRITERS];
    for (int kind = 0; kind < N_WRITERS; kind++)
        writer_kills[kind] = kill_writers(kind);
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_nested_folder(ctx);
    test_leftovers(ctx, small, kills);
    kiln_context_destroy(ctx);
    test_killed_writers(writer_kills);
    test_full_disk_save();
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
