/* The safetensors reader on one small file per malformed case (the files
 * in test/data/safetensors/ double as the fuzzer's seed corpus), the JSON
 * parser's edge cases, and an atomic write killed at random points. */
#include "harness.h"
#include "runtime/context/context.h"
#include "runtime/formats/safetensors.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct bad_case {
    const char *file;
    kiln_status status;
    const char *message;
} bad_case;

static void test_files(kiln_context *ctx, const char *root)
{
    char path[512];
    static const bad_case cases[] = {
        {.file = "too_short", .status = KILN_ERROR_FORMAT,
         .message = "too short for a safetensors header"},
        {.file = "header_length_huge", .status = KILN_ERROR_FORMAT,
         .message = "header length 1099511627776 is out of range"},
        {.file = "header_past_end", .status = KILN_ERROR_FORMAT,
         .message = "header length 500 is out of range"},
        {.file = "not_an_object", .status = KILN_ERROR_FORMAT,
         .message = "does not start with '{'"},
        {.file = "bad_json", .status = KILN_ERROR_FORMAT,
         .message = "malformed JSON header at byte"},
        {.file = "bad_utf8", .status = KILN_ERROR_FORMAT, .message = "invalid UTF-8"},
        {.file = "unknown_dtype", .status = KILN_ERROR_FORMAT,
         .message = "tensor 'a' has unknown dtype 'F33'"},
        {.file = "offsets_past_end", .status = KILN_ERROR_FORMAT,
         .message = "tensor 'a' ends at byte 16, past the 4 bytes"},
        {.file = "overlap", .status = KILN_ERROR_FORMAT,
         .message = "tensor 'b' starts at byte 4 where 8 was expected"},
        {.file = "gap", .status = KILN_ERROR_FORMAT,
         .message = "tensor 'b' starts at byte 8 where 4 was expected"},
        {.file = "size_mismatch", .status = KILN_ERROR_FORMAT,
         .message = "data_offsets span 8 bytes, its shape and dtype need 12"},
        {.file = "size_overflow", .status = KILN_ERROR_FORMAT, .message = "its size overflows"},
        {.file = "negative_dim", .status = KILN_ERROR_FORMAT,
         .message = "shape entry 0 is not a non-negative integer"},
        {.file = "backwards_offsets", .status = KILN_ERROR_FORMAT,
         .message = "data_offsets [4, 0] run backwards"},
        {.file = "trailing_data", .status = KILN_ERROR_FORMAT,
         .message = "the tensors cover 4 bytes of the 8 bytes"},
        {.file = "truncated_data", .status = KILN_ERROR_FORMAT,
         .message = "past the 8 bytes of data"},
        {.file = "duplicate_key", .status = KILN_ERROR_FORMAT, .message = "duplicate key"},
        {.file = "deep_nesting", .status = KILN_ERROR_FORMAT, .message = "nested too deeply"},
        {.file = "metadata_not_string", .status = KILN_ERROR_FORMAT,
         .message = "__metadata__ value 'k' is not a string"},
        {.file = "extra_field", .status = KILN_ERROR_FORMAT,
         .message = "must be an object of dtype, shape and data_offsets"},
        {.file = "control_char", .status = KILN_ERROR_FORMAT,
         .message = "control character in a string"},
        {.file = "missing", .status = KILN_ERROR_IO, .message = "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/test/data/safetensors/%s.safetensors", root,
                 cases[i].file);
        kiln_st_file f;
        CHECK_FAILS(ctx, cases[i].status, cases[i].message, kiln_st_read(ctx, path, &f));
    }
    snprintf(path, sizeof path, "%s/test/data/safetensors/valid.safetensors", root);
    kiln_st_file f;
    CHECK_OK(ctx, kiln_st_read(ctx, path, &f));
    const kiln_st_tensor *a = kiln_st_find(&f, "a"), *b = kiln_st_find(&f, "b");
    CHECK(a && b && a->rank == 1 && a->shape[0] == 2 && b->rank == 2 && b->begin == 8);
    if (b) {
        float v;
        memcpy(&v, kiln_st_data(&f, b), 4);
        CHECK(v == 3.0f);
    }
    CHECK(kiln_st_meta(&f, "format") && strcmp(kiln_st_meta(&f, "format"), "pt") == 0);
    kiln_st_free(&f);
    snprintf(path, sizeof path, "%s/test/data/safetensors/valid_empty.safetensors", root);
    CHECK_OK(ctx, kiln_st_read(ctx, path, &f));
    kiln_st_free(&f);
    printf("safetensors: %zu malformed files rejected, valid ones read\n",
           sizeof cases / sizeof cases[0]);
}

static void test_json(kiln_context *ctx)
{
    static const char *good[] = {
        "{}", " { \"a\" : [ 1 , 2 ] } ", "{\"\\u00e9\\ud83d\\ude00\":\"x\\n\"}", "[true,false,null]",
        "{\"k\":\"caf\xc3\xa9\"}",
    };
    static const char *bad[] = {
        "", "{", "{\"a\"}", "{\"a\":}", "[1,]", "{\"a\":1,}", "\"\\ud800\"", "\"\\x\"", "01",
        "{} x", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "[\"\\u0000\"]", "tru", "{\"a\":1 \"b\":2}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        kiln_json_doc d;
        CHECK_OK(ctx, kiln_json_parse(ctx, "good", good[i], strlen(good[i]), &d));
        kiln_json_free(&d);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_json_doc d;
        if (kiln_json_parse(ctx, "bad", bad[i], strlen(bad[i]), &d) != KILN_ERROR_FORMAT) {
            fprintf(stderr, "JSON case %zu (%s) was accepted\n", i, bad[i]);
            test_failures++;
            kiln_json_free(&d);
        }
    }
    kiln_json_doc d;
    const char *s = "{\"x\":\"a\\\"b\"}";
    CHECK_OK(ctx, kiln_json_parse(ctx, "s", s, strlen(s), &d));
    const kiln_json *x = kiln_json_get(d.root, "x");
    CHECK(x && strcmp(x->text, "a\"b") == 0);
    kiln_json_free(&d);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A child saves 1 MiB files over and over; the parent kills it at a random
 * moment, 50 times. The file at the path must always be complete: some
 * earlier save, whole. Each round has a file of its own and the parent
 * waits until the child's first save is there, then kills it within two
 * save times (measured here first), so every kill lands during some save
 * however slow the machine (a fixed pause missed the first save under
 * ThreadSanitizer on a busy machine, and no round was checked). */
static void test_killed_saves(kiln_context *ctx)
{
    char dir[] = "/tmp/kiln-kill-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[160];
    enum { floats = 1 << 18, rounds = 50 };
    static float data[floats];
    kiln_st_entry e = {.name = "w", .rank = 1, .shape = {floats}, .data = data};
    snprintf(path, sizeof path, "%s/timing.safetensors", dir);
    const double start = seconds_now();
    CHECK_OK(ctx, kiln_st_write(ctx, path, &e, 1, NULL, NULL, 0));
    const double save_seconds = seconds_now() - start;
    srand((unsigned)time(NULL));
    int checked = 0;
    for (int round = 0; round < rounds; round++) {
        snprintf(path, sizeof path, "%s/ckpt%d.safetensors", dir, round);
        const pid_t child = fork();
        if (child == 0) {
            for (int i = 0;; i++) {
                for (int j = 0; j < floats; j++)
                    data[j] = (float)(round * 1000 + i);
                char value[32];
                snprintf(value, sizeof value, "%d", round * 1000 + i);
                const char *key = "save", *val = value;
                kiln_st_write(ctx, path, &e, 1, &key, &val, 1);
            }
        }
        for (int waited = 0; access(path, F_OK) != 0 && waited < 60000; waited++) {
            const struct timespec ms = {.tv_nsec = 1000000};
            nanosleep(&ms, NULL);
        }
        const long most = (long)(2e9 * save_seconds) + 1000000;
        const struct timespec pause = {.tv_sec = 0,
                                       .tv_nsec = (long)((double)rand() / RAND_MAX * (double)most)
                                                  % 1000000000L};
        nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        kiln_st_file f;
        kiln_status st = kiln_st_read(ctx, path, &f);
        CHECK_OK(ctx, st);
        if (st != KILN_OK)
            continue;
        const kiln_st_tensor *t = kiln_st_find(&f, "w");
        const char *saved = kiln_st_meta(&f, "save");
        CHECK(t && saved && t->shape[0] == floats);
        if (t && saved) {
            const float want = (float)atoi(saved);
            const unsigned char *p = kiln_st_data(&f, t);
            int same = 1;
            for (int j = 0; j < floats && same; j += 997) {
                float v;
                memcpy(&v, p + 4 * j, 4);
                same = v == want;
            }
            CHECK(same);
            checked++;
        }
        kiln_st_free(&f);
    }
    printf("killed saves: %d of %d kills (each within %.1f ms of a save) left a complete, "
           "consistent file\n", checked, rounds, 2e3 * save_seconds);
    CHECK(checked == rounds);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (argc > 1)
        root = argv[1];
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set");
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    test_files(&ctx, root);
    test_json(&ctx);
    test_killed_saves(&ctx);
    kiln_context_release_host_only(&ctx);
    return test_finish("test_safetensors");
}
