/* A character language model (GPT-style decoder) trained on the Python
 * standard library's own source:
 *   Input(T ids) -> Embedding(V, W) -> PositionEmbedding(T)
 *   -> N x [x + MHA(LN(x), causal), x + Dense(W)(Dense(4W, gelu)(LN(x)))]
 *   -> LayerNormalization -> Dense(V, softmax); Adam.
 * Each sample is T characters and the T characters that follow each of them
 * (sparse labels, one per position). Prints the validation loss in bits per
 * character after every epoch beside the unigram baseline, then a sample of
 * generated text.
 * Usage: char_lm [--blocks N] [--width N] [--heads N] [--context T] [--batch N]
 *                [--steps N] [--epochs N] [--lr X] [--seed N] [--devices SPEC]
 *                [--text DIR] [--val-windows N] [--warmup N] [--generate N]
 *                [--prompt S] [--temperature X] [--gelu tanh|exact] [--dump DIR]
 *                [--save FILE] [--init FILE] [--lora RANK] [--ema M]
 *                [--activations float32|float16 | --half]
 * --steps are training steps per epoch; --devices takes what KILN_DEVICES
 * takes; KILN_STRATEGY picks the strategy (one_device, mirrored, pipeline,
 * multi_worker under mpirun, where rank 0 prints and dumps). --warmup N
 * trains N steps first, untimed (they still train).
 * --dump DIR writes what test/bench/torch_char_lm.py needs to train the same
 * model in PyTorch: config.json, initial.safetensors, batches.bin (every
 * training window in order, T + 1 int32 ids each), losses.txt (each step's
 * loss) and final.safetensors.
 * --save FILE writes the trained model (kiln_model_save); --init FILE
 * starts from the weights of one (the same sizes), and with --lora RANK
 * fine-tunes it as KerasHub's enable_lora does: LoRA of rank RANK (alpha
 * RANK) on every block's attention (its query and value projections),
 * every other weight frozen. --ema M keeps Keras's moving average of the
 * weights (use_ema, momentum M), which validation and generation use.
 * --activations float16 (or --half) keeps the layers' outputs in half
 * precision between forward and backward (activation_storage;
 * test/bench/memory.sh shows what it saves); weights stay float32, and
 * "--half weights" is refused. */
#include "kiln.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The vocabulary: 0 is every byte not listed ("other": non-ASCII bytes, rare
 * control characters), 1 newline, 2 tab, 3.. the 95 printable ASCII
 * characters from ' ' to '~'. */
#define VOCAB_OTHER 0
#define VOCAB_SIZE (3 + 95)
#define NATS_PER_BIT 0.69314718055994530942   /* ln 2 */

typedef struct args {
    int blocks, width, heads, context, batch, steps, epochs, val_windows, warmup, generate;
    int lora;   /* rank; 0: none */
    float lr, temperature, ema;
    kiln_storage storage;
    int storage_given;   /* --activations or --half: at most one */
    kiln_activation gelu;   /* exact (erf) or the tanh approximation */
    uint64_t seed;
    const char *devices, *text, *prompt, *dump, *save, *init;
    int quiet;   /* under multi_worker every process trains; rank 0 reports */
} args;

typedef struct stream {
    int32_t *ids;
    int64_t n;
} stream;

/* One random-number generator for the example's own choices (window offsets,
 * sampling): splitmix64, so the windows are the same on every platform. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state)
{
    return (double)(next_random(state) >> 11) * (1.0 / 9007199254740992.0);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void say(const args *a, const char *format, ...)
{
    if (a->quiet)
        return;
    va_list ap;
    va_start(ap, format);
    vprintf(format, ap);
    va_end(ap);
    fflush(stdout);
}

static const char usage[] =
    "usage: char_lm [--blocks N] [--width N] [--heads N] [--context T] [--batch N]\n"
    "               [--steps N] [--epochs N] [--lr X] [--seed N] [--devices SPEC]\n"
    "               [--text DIR] [--val-windows N] [--warmup N] [--generate N]\n"
    "               [--prompt S] [--temperature X] [--gelu tanh|exact] [--dump DIR]\n"
    "               [--save FILE] [--init FILE] [--lora RANK] [--ema M]\n"
    "               [--activations float32|float16 | --half]\n"
    "Trains a character language model on the *.py files under --text, prints the\n"
    "validation bits per character after every epoch, then generated text. --steps\n"
    "are training steps per epoch; --devices takes what KILN_DEVICES takes;\n"
    "KILN_STRATEGY picks the strategy. --dump DIR writes what\n"
    "test/bench/torch_char_lm.py needs to train the same model in PyTorch.\n"
    "--save FILE writes the trained model; --init FILE starts from one (same sizes);\n"
    "--lora RANK (with --init) fine-tunes it with LoRA on the attention layers, every\n"
    "other weight frozen; --ema M keeps a moving average of the weights.\n"
    "--activations float16 (or --half) keeps the layers' outputs in half precision\n"
    "between forward and backward (kiln_compile_options.activation_storage); weights\n"
    "stay float32 (--half weights is refused).\n";

/* 1: parsed; 0: a usage error (said on stderr); -1: --help (the usage on
 * stdout). */
static int parse_args(int argc, char **argv, args *a)
{
    /* Sized to learn in a few minutes on this project's 2-core CPU
     * (docs/examples.md); Keras's exact GELU. */
    *a = (args){.blocks = 4, .width = 128, .heads = 4, .context = 64, .batch = 32,
                .steps = 100, .epochs = 8, .val_windows = 256, .generate = 300,
                .lr = 2e-3f, .temperature = 0.7f, .gelu = KILN_ACTIVATION_GELU, .seed = 1,
                .text = "/usr/lib/python3.11", .prompt = "def "};
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return fputs(usage, stdout), -1;
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        /* --half alone is a flag (the spelling); "--half activations" reads as
         * it, and "--half weights" is refused rather than taken for a flag. */
        if (strcmp(o, "--half") == 0) {
            if (v && strcmp(v, "weights") == 0)
                return fprintf(stderr, "--half weights is not offered: weights stay float32, "
                                       "since a half copy beside the optimizer's float32 "
                                       "master adds memory and saves none on a device "
                                       "without half arithmetic (--half keeps the "
                                       "activations in half)\n"), 0;
            if (a->storage_given++)
                return fprintf(stderr, "--half is --activations float16: give one of "
                                       "them\n"), 0;
            a->storage = KILN_STORAGE_FLOAT16;
            i -= !(v && strcmp(v, "activations") == 0);   /* the loop steps over a value */
            continue;
        }
        if (!v)
            return fprintf(stderr, "%s needs a value\n", o), 0;
        if (strcmp(o, "--blocks") == 0)
            a->blocks = atoi(v);
        else if (strcmp(o, "--width") == 0)
            a->width = atoi(v);
        else if (strcmp(o, "--heads") == 0)
            a->heads = atoi(v);
        else if (strcmp(o, "--context") == 0)
            a->context = atoi(v);
        else if (strcmp(o, "--batch") == 0)
            a->batch = atoi(v);
        else if (strcmp(o, "--steps") == 0)
            a->steps = atoi(v);
        else if (strcmp(o, "--epochs") == 0)
            a->epochs = atoi(v);
        else if (strcmp(o, "--lr") == 0)
            a->lr = (float)atof(v);
        else if (strcmp(o, "--seed") == 0)
            a->seed = strtoull(v, NULL, 10);
        else if (strcmp(o, "--devices") == 0)
            a->devices = v;
        else if (strcmp(o, "--text") == 0)
            a->text = v;
        else if (strcmp(o, "--val-windows") == 0)
            a->val_windows = atoi(v);
        else if (strcmp(o, "--warmup") == 0)
            a->warmup = atoi(v);
        else if (strcmp(o, "--generate") == 0)
            a->generate = atoi(v);
        else if (strcmp(o, "--prompt") == 0)
            a->prompt = v;
        else if (strcmp(o, "--temperature") == 0)
            a->temperature = (float)atof(v);
        else if (strcmp(o, "--gelu") == 0 && strcmp(v, "exact") == 0)
            a->gelu = KILN_ACTIVATION_GELU;
        else if (strcmp(o, "--gelu") == 0 && strcmp(v, "tanh") == 0)
            a->gelu = KILN_ACTIVATION_GELU_TANH;
        else if (strcmp(o, "--dump") == 0)
            a->dump = v;
        else if (strcmp(o, "--save") == 0)
            a->save = v;
        else if (strcmp(o, "--init") == 0)
            a->init = v;
        else if (strcmp(o, "--lora") == 0)
            a->lora = atoi(v);
        else if (strcmp(o, "--ema") == 0)
            a->ema = (float)atof(v);
        else if (strcmp(o, "--activations") == 0 && a->storage_given++)
            return fprintf(stderr, "--half is --activations float16: give one of them\n"), 0;
        else if (strcmp(o, "--activations") == 0 && strcmp(v, "float32") == 0)
            a->storage = KILN_STORAGE_FLOAT32;
        else if (strcmp(o, "--activations") == 0 && strcmp(v, "float16") == 0)
            a->storage = KILN_STORAGE_FLOAT16;
        else
            return fprintf(stderr, "unknown option %s\n", o), 0;
    }
    if (a->blocks < 0 || a->width < 1 || a->heads < 1 || a->width % a->heads || a->context < 1 ||
        a->batch < 1 || a->steps < 1 || a->epochs < 1 || a->val_windows < 0 || a->warmup < 0 ||
        a->generate < 0 || !(a->lr > 0.0f) || !(a->temperature > 0.0f))
        return fprintf(stderr, "bad option: sizes must be positive, the width a multiple of "
                               "the heads\n"), 0;
    if (a->lora < 0 || !(a->ema >= 0.0f && a->ema < 1.0f))
        return fprintf(stderr, "bad option: --lora needs a rank >= 1, --ema a momentum in "
                               "(0, 1)\n"), 0;
    if (a->lora && !a->init)
        return fprintf(stderr, "--lora fine-tunes a trained model: give --init FILE (one "
                               "that --save wrote)\n"), 0;
    if (a->dump && (a->lora || a->ema > 0.0f))
        return fprintf(stderr, "--dump writes the model torch_char_lm.py trains, which has "
                               "no LoRA or moving average\n"), 0;
    return 1;
}

/* ---- the text ---------------------------------------------------------- */

static int32_t char_id(unsigned char c)
{
    if (c == '\n')
        return 1;
    if (c == '\t')
        return 2;
    if (c >= ' ' && c <= '~')
        return 3 + (c - ' ');
    return VOCAB_OTHER;
}

static char id_char(int32_t id)
{
    return id == 1 ? '\n' : id == 2 ? '\t' : id >= 3 ? (char)(' ' + id - 3) : '?';
}

typedef struct path_list {
    char **paths;
    size_t n, cap;
} path_list;

static int path_push(path_list *l, const char *path)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        char **p = realloc(l->paths, cap * sizeof *p);
        if (!p)
            return 0;
        l->paths = p;
        l->cap = cap;
    }
    return (l->paths[l->n++] = strdup(path)) != NULL;
}

/* Every regular *.py file under `dir`, recursively; symbolic links are not
 * followed, so a file is read once. */
static int find_py(const char *dir, path_list *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int ok = 1;
    char path[4096];
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat s;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &s) != 0)
            continue;
        size_t len = strlen(e->d_name);
        if (S_ISDIR(s.st_mode))
            ok = find_py(path, out);
        else if (S_ISREG(s.st_mode) && len > 3 && strcmp(e->d_name + len - 3, ".py") == 0)
            ok = path_push(out, path);
    }
    closedir(d);
    return ok;
}

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int append_file(stream *s, int64_t *cap, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char buf[65536];
    for (size_t got; (got = fread(buf, 1, sizeof buf, f)) > 0;) {
        if (s->n + (int64_t)got > *cap) {
            int64_t c = 2 * (*cap + (int64_t)got);
            int32_t *p = realloc(s->ids, (size_t)c * sizeof *p);
            if (!p)
                return fclose(f), 0;
            s->ids = p;
            *cap = c;
        }
        for (size_t i = 0; i < got; i++)
            s->ids[s->n++] = char_id(buf[i]);
    }
    fclose(f);
    return 1;
}

/* Reads the files in sorted path order (the same split and stream on every
 * machine); every tenth file goes to validation, so validation text comes
 * from modules the model never trained on. */
static int load_text(const char *dir, stream *train, stream *val, size_t *files)
{
    path_list l = {0};
    int ok = find_py(dir, &l) && l.n >= 10;
    if (ok)
        qsort(l.paths, l.n, sizeof *l.paths, compare_paths);
    int64_t cap_train = 0, cap_val = 0;
    for (size_t i = 0; ok && i < l.n; i++)
        ok = i % 10 == 9 ? append_file(val, &cap_val, l.paths[i])
                         : append_file(train, &cap_train, l.paths[i]);
    for (size_t i = 0; i < l.n; i++)
        free(l.paths[i]);
    free(l.paths);
    *files = l.n;
    return ok;
}

/* The entropy of the training text's character distribution, in bits: what
 * a model that ignores context can reach at best. */
static double unigram_bits(const stream *s)
{
    double count[VOCAB_SIZE] = {0}, bits = 0.0;
    for (int64_t i = 0; i < s->n; i++)
        count[s->ids[i]] += 1.0;
    for (int v = 0; v < VOCAB_SIZE; v++)
        if (count[v] > 0.0)
            bits -= count[v] / (double)s->n * log2(count[v] / (double)s->n);
    return bits;
}

/* ---- samples ----------------------------------------------------------- */

/* Inputs are a window's first T ids, labels the T ids one further on. */
static kiln_status window_dataset(kiln_context *ctx, const stream *s, const int64_t *offsets,
                                  int64_t count, int32_t t, FILE *dump, kiln_dataset **out)
{
    int32_t *x = malloc((size_t)(count * t) * sizeof *x);
    int32_t *y = malloc((size_t)(count * t) * sizeof *y);
    kiln_status st = x && y ? KILN_OK : KILN_ERROR_OUT_OF_MEMORY;
    for (int64_t i = 0; st == KILN_OK && i < count; i++) {
        memcpy(x + i * t, s->ids + offsets[i], (size_t)t * sizeof *x);
        memcpy(y + i * t, s->ids + offsets[i] + 1, (size_t)t * sizeof *y);
        if (dump && fwrite(s->ids + offsets[i], sizeof *x, (size_t)t + 1, dump) != (size_t)t + 1)
            st = KILN_ERROR_IO;
    }
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 1,
                          .feature_dims = {t}, .int_features = x,
                          .label_kind = KILN_LABELS_SPARSE, .sparse_labels = y,
                          .label_size = t, .num_classes = VOCAB_SIZE};
    if (st == KILN_OK)
        st = kiln_dataset_from_arrays(ctx, &d, out);
    free(x);
    free(y);
    return st;
}

/* `count` windows at offsets drawn uniformly from the whole stream. */
static kiln_status random_windows(kiln_context *ctx, const stream *s, int64_t count, int32_t t,
                                  uint64_t *rng, FILE *dump, kiln_dataset **out)
{
    int64_t *offsets = malloc((size_t)count * sizeof *offsets);
    if (!offsets)
        return KILN_ERROR_OUT_OF_MEMORY;
    const uint64_t span = (uint64_t)(s->n - t);
    for (int64_t i = 0; i < count; i++)
        offsets[i] = (int64_t)(next_random(rng) % span);
    kiln_status st = window_dataset(ctx, s, offsets, count, t, dump, out);
    free(offsets);
    return st;
}

/* `count` fixed windows spread evenly over the stream (not overlapping when
 * the stream holds that many), the same every epoch and run. */
static kiln_status strided_windows(kiln_context *ctx, const stream *s, int64_t count, int32_t t,
                                   kiln_dataset **out)
{
    const int64_t span = s->n - t, stride = span / count > t ? span / count : t;
    if (count > span / t)
        count = span / t;
    int64_t *offsets = malloc((size_t)count * sizeof *offsets);
    if (!offsets)
        return KILN_ERROR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < count; i++)
        offsets[i] = i * stride;
    kiln_status st = window_dataset(ctx, s, offsets, count, t, NULL, out);
    free(offsets);
    return st;
}

/* ---- the model --------------------------------------------------------- */

/* Names that say where a tensor belongs ("block_0_attention/query/kernel"):
 * torch_char_lm.py loads them by name. */
static kiln_node block(kiln_model *m, kiln_node x, const args *a, int b)
{
    char ln1[32], att[32], add1[32], ln2[32], up[32], down[32], add2[32];
    snprintf(ln1, sizeof ln1, "block_%d_ln_1", b);
    snprintf(att, sizeof att, "block_%d_attention", b);
    snprintf(add1, sizeof add1, "block_%d_add_1", b);
    snprintf(ln2, sizeof ln2, "block_%d_ln_2", b);
    snprintf(up, sizeof up, "block_%d_mlp_up", b);
    snprintf(down, sizeof down, "block_%d_mlp_down", b);
    snprintf(add2, sizeof add2, "block_%d_add_2", b);
    kiln_layer_norm_options n1 = {.struct_size = sizeof n1, .name = ln1};
    kiln_layer_norm_options n2 = {.struct_size = sizeof n2, .name = ln2};
    kiln_multi_head_attention_options mha = {.struct_size = sizeof mha, .name = att,
                                             .num_heads = a->heads,
                                             .key_dim = a->width / a->heads,
                                             .use_causal_mask = 1};
    kiln_dense_options d_up = {.struct_size = sizeof d_up, .name = up, .units = 4 * a->width,
                               .activation = a->gelu};
    kiln_dense_options d_down = {.struct_size = sizeof d_down, .name = down, .units = a->width};
    kiln_node h = kiln_layer_normalization(m, x, &n1);
    kiln_node sum1[2] = {x, kiln_multi_head_attention(m, h, h, &mha)};
    x = kiln_add(m, sum1, 2, &(kiln_add_options){.name = add1});
    h = kiln_layer_normalization(m, x, &n2);
    h = kiln_dense(m, h, &d_up);
    kiln_node sum2[2] = {x, kiln_dense(m, h, &d_down)};
    return kiln_add(m, sum2, 2, &(kiln_add_options){.name = add2});
}

/* --lora: LoRA on every attention layer, every other layer frozen. */
static kiln_status enable_lora(kiln_model *m, const args *a)
{
    int32_t n = 0;
    kiln_status st = kiln_model_layer_count(m, &n);
    for (int32_t i = 0; st == KILN_OK && i < n; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        if ((st = kiln_model_layer_info(m, i, &info)) != KILN_OK)
            break;
        if (strcmp(info.kind, "multi_head_attention") == 0)
            st = kiln_model_enable_lora(m, info.name, a->lora, 0.0f);
        else if (info.n_tensors > 0)
            st = kiln_model_set_trainable(m, info.name, 0);
    }
    return st;
}

static kiln_model *decoder(kiln_context *ctx, const args *a)
{
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m) != KILN_OK)
        return NULL;
    const int32_t shape[] = {a->context};
    kiln_embedding_options emb = {.struct_size = sizeof emb, .name = "token_embedding",
                                  .input_dim = VOCAB_SIZE, .output_dim = a->width};
    kiln_position_embedding_options pos = {.struct_size = sizeof pos,
                                           .name = "position_embedding",
                                           .max_length = a->context};
    kiln_layer_norm_options final_ln = {.struct_size = sizeof final_ln, .name = "final_ln"};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "logits",
                               .units = VOCAB_SIZE, .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input_ints(m, 1, shape, &(kiln_input_options){.name = "tokens"});
    kiln_embedding(m, KILN_NODE_PREVIOUS, &emb);
    kiln_node x = kiln_position_embedding(m, KILN_NODE_PREVIOUS, &pos);
    for (int b = 0; b < a->blocks; b++)
        x = block(m, x, a, b);
    kiln_layer_normalization(m, x, &final_ln);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    if (a->lora && enable_lora(m, a) != KILN_OK) {
        kiln_model_destroy(m);
        return NULL;
    }
    return m;
}

/* --init: a model without LoRA loads the file's weights (kiln_model_save's
 * hold LoRA merged), and `m` takes every tensor of it by name; its
 * adapters keep their initial values (B zeros: the loaded model's
 * predictions). */
static kiln_status init_from(kiln_model *m, kiln_context *ctx, const args *a,
                             const kiln_compile_options *opts)
{
    args plain = *a;
    plain.lora = 0;
    kiln_model *from = decoder(ctx, &plain);
    kiln_status st = from ? kiln_model_compile(from, opts) : KILN_ERROR_OUT_OF_MEMORY;
    if (st == KILN_OK)
        st = kiln_model_load_weights(from, a->init);
    int32_t n = 0;
    if (st == KILN_OK)
        st = kiln_model_tensor_count(from, &n);
    for (int32_t t = 0; st == KILN_OK && t < n; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        float *values = NULL;
        if ((st = kiln_model_tensor_info(from, t, &info)) == KILN_OK &&
            !(values = malloc((size_t)info.size * sizeof *values)))
            st = KILN_ERROR_OUT_OF_MEMORY;
        if (st == KILN_OK)
            st = kiln_model_get_tensor(from, info.name, values, info.size);
        if (st == KILN_OK)
            st = kiln_model_set_tensor(m, info.name, values, info.size);
        free(values);
    }
    kiln_model_destroy(from);
    return st;
}

/* ---- training ---------------------------------------------------------- */

/* What the step callback keeps: for --dump each step's loss (fit reports
 * running means over the epoch, so step k's own is k * mean_k - (k - 1) *
 * mean_(k-1); every batch holds the same number of positions), and the
 * epoch's training time without its validation, which the history's
 * epoch time includes. */
typedef struct step_log {
    FILE *f;
    double previous_mean, train_seconds;
} step_log;

static int log_step(void *user, const kiln_progress *p)
{
    step_log *l = user;
    if (p->event != KILN_EVENT_BATCH_END)
        return KILN_CALLBACK_CONTINUE;
    const double k = (double)p->step;
    if (l->f)
        fprintf(l->f, "%.9g\n", k * p->loss - (k - 1.0) * (p->step > 1 ? l->previous_mean : 0.0));
    l->previous_mean = p->loss;
    l->train_seconds = p->seconds;
    return KILN_CALLBACK_CONTINUE;
}

/* One fit call of `steps` steps on fresh random windows. */
static kiln_status train_steps(kiln_model *m, kiln_context *ctx, const stream *train,
                               const kiln_dataset *val, const args *a, int64_t steps,
                               uint64_t *rng, FILE *batches, step_log *log)
{
    kiln_dataset *data = NULL;
    kiln_status st = random_windows(ctx, train, steps * a->batch, a->context, rng, batches, &data);
    kiln_fit_options fit = {.struct_size = sizeof fit};
    fit.epochs = 1;
    fit.batch_size = a->batch;
    fit.no_shuffle = 1;   /* the windows are random already, and --dump records their order */
    fit.validation = val;
    fit.verbosity = KILN_VERBOSE_SILENT;
    fit.callback = log_step;
    fit.callback_user = log;
    if (st == KILN_OK)
        st = kiln_model_fit(m, data, &fit);
    kiln_dataset_destroy(data);
    return st;
}

static void print_plan(const kiln_model *m, const args *a)
{
    size_t length = 0;
    kiln_model_stage_plan(m, NULL, 0, &length);
    char *text = malloc(length + 1);
    if (text && kiln_model_stage_plan(m, text, length + 1, NULL) == KILN_OK)
        say(a, "%s", text);
    free(text);
}

static kiln_status print_setup(kiln_model *m, const args *a)
{
    const char *strategy = "";
    int32_t replicas = 0;
    int64_t params = 0;
    kiln_status st = kiln_model_distribution(m, &strategy, &replicas);
    if (st == KILN_OK)
        st = kiln_model_parameter_count(m, &params);
    if (st != KILN_OK)
        return st;
    int32_t tensors = 0;
    int64_t trainable = 0;
    if (st == KILN_OK)
        st = kiln_model_tensor_count(m, &tensors);
    for (int32_t t = 0; st == KILN_OK && t < tensors; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        if ((st = kiln_model_tensor_info(m, t, &info)) == KILN_OK && info.trainable)
            trainable += info.size;
    }
    if (st != KILN_OK)
        return st;
    say(a, "model: %d blocks, width %d, %d heads, context %d, vocabulary %d: %lld parameters, "
           "%lld trainable\n", a->blocks, a->width, a->heads, a->context, VOCAB_SIZE,
           (long long)params, (long long)trainable);
    if (a->lora)
        say(a, "LoRA rank %d on every attention layer's query and value projections, the "
               "other weights frozen, from %s\n", a->lora, a->init);
    else if (a->init)
        say(a, "initial weights from %s\n", a->init);
    if (a->ema > 0.0f)
        say(a, "moving average of the weights, momentum %g\n", (double)a->ema);
    say(a, "strategy: %s, %d %s, global batch %d, %d steps x %d epochs, Adam lr %g\n", strategy,
           (int)replicas, strcmp(strategy, "pipeline") == 0 ? "stage(s)" : "replica(s)",
           a->batch, a->steps, a->epochs, (double)a->lr);
    if (strcmp(strategy, "pipeline") == 0)
        print_plan(m, a);
    fflush(stdout);
    return KILN_OK;
}

/* ---- generation -------------------------------------------------------- */

/* Draws from softmax(log p / temperature), i.e. p^(1 / temperature) renormalised. */
static int32_t sample_id(const float *p, float temperature, uint64_t *rng)
{
    double w[VOCAB_SIZE], total = 0.0;
    for (int v = 0; v < VOCAB_SIZE; v++)
        total += w[v] = p[v] > 0.0f ? pow((double)p[v], 1.0 / (double)temperature) : 0.0;
    double r = uniform01(rng) * total;
    for (int v = 0; v < VOCAB_SIZE; v++)
        if ((r -= w[v]) < 0.0)
            return v;
    return VOCAB_SIZE - 1;
}

/* The model sees T positions; a shorter text fills the first ones (the causal
 * mask keeps the rest from mattering), a longer one its last T characters.
 * Ids go to predict as int32 behind its `const float *`. */
static kiln_status generate(kiln_model *m, const args *a, uint64_t *rng)
{
    const int32_t t = a->context;
    const size_t prompt = strlen(a->prompt), total = prompt + (size_t)a->generate;
    int32_t *text = calloc(total + 1, sizeof *text), *window = calloc((size_t)t, sizeof *window);
    float *out = malloc((size_t)t * VOCAB_SIZE * sizeof *out);
    kiln_status st = text && window && out ? KILN_OK : KILN_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < prompt; i++)
        text[i] = char_id((unsigned char)a->prompt[i]);
    say(a, "sample (temperature %g):\n%s", (double)a->temperature, a->prompt);
    for (size_t n = prompt; st == KILN_OK && n < total; n++) {
        const size_t start = n > (size_t)t ? n - (size_t)t : 0, len = n - start;
        memset(window, 0, (size_t)t * sizeof *window);
        memcpy(window, text + start, len * sizeof *window);
        const kiln_batch_arrays in = {.struct_size = sizeof in, .count = 1,
                                      .int_features = window};
        st = kiln_model_predict(m, &in, out, 1);
        if (st == KILN_OK) {
            text[n] = sample_id(out + (len - 1) * VOCAB_SIZE, a->temperature, rng);
            say(a, "%c", id_char(text[n]));
        }
    }
    say(a, "\n");
    free(text);
    free(window);
    free(out);
    return st;
}

/* ---- main -------------------------------------------------------------- */

static FILE *dump_open(const args *a, const char *name, const char *mode)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", a->dump, name);
    return fopen(path, mode);
}

static kiln_status dump_start(kiln_model *m, const args *a, FILE **batches, step_log *log)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/initial.safetensors", a->dump);
    kiln_status st = kiln_model_save_weights(m, path);
    FILE *c = st == KILN_OK ? dump_open(a, "config.json", "w") : NULL;
    *batches = dump_open(a, "batches.bin", "wb");
    log->f = dump_open(a, "losses.txt", "w");
    if (st == KILN_OK && (!c || !*batches || !log->f))
        st = KILN_ERROR_IO;
    if (c)
        fprintf(c, "{\"blocks\": %d, \"width\": %d, \"heads\": %d, \"context\": %d, "
                   "\"batch\": %d, \"steps\": %d, \"lr\": %.9g, \"vocab\": %d, \"gelu\": \"%s\"}\n",
                a->blocks, a->width, a->heads, a->context, a->batch,
                a->epochs * a->steps + a->warmup, (double)a->lr, VOCAB_SIZE,
                a->gelu == KILN_ACTIVATION_GELU ? "exact" : "tanh");
    if (c && fclose(c) != 0 && st == KILN_OK)
        st = KILN_ERROR_IO;
    return st;
}

static kiln_status train(kiln_model *m, kiln_context *ctx, const stream *tr, const stream *va,
                         const args *a)
{
    kiln_dataset *val = NULL;
    FILE *batches = NULL;
    step_log steps_log = {0};
    uint64_t rng = a->seed;
    kiln_status st = KILN_OK;
    if (a->val_windows > 0)
        st = strided_windows(ctx, va, a->val_windows, a->context, &val);
    if (st == KILN_OK && a->dump)
        st = dump_start(m, a, &batches, &steps_log);
    if (st == KILN_OK && a->warmup > 0)
        st = train_steps(m, ctx, tr, NULL, a, a->warmup, &rng, batches, &steps_log);
    double train_seconds = 0.0;
    for (int e = 0; st == KILN_OK && e < a->epochs; e++) {
        const double t0 = seconds_now();
        st = train_steps(m, ctx, tr, val, a, a->steps, &rng, batches, &steps_log);
        const double t1 = seconds_now();
        int32_t n = 0;
        kiln_epoch_record r = {.struct_size = sizeof r};
        if (st == KILN_OK && (st = kiln_model_history_count(m, &n)) == KILN_OK)
            st = kiln_model_history_epoch(m, n - 1, &r);
        if (st != KILN_OK)
            break;
        const double train_s = steps_log.train_seconds;
        train_seconds += t1 - t0;
        say(a, "epoch %d/%d: train %.4f bits/char", e + 1, a->epochs, r.loss / NATS_PER_BIT);
        if (r.has_validation)
            say(a, ", validation %.4f bits/char (loss %.8f)", r.val_loss / NATS_PER_BIT,
                   r.val_loss);
        say(a, ", %.1f s, %.0f tokens/s\n", t1 - t0,
               (double)a->steps * a->batch * a->context / train_s);
        fflush(stdout);
    }
    if (st == KILN_OK)
        say(a, "training time: %.1f s for %d steps (validation included)\n", train_seconds,
               a->steps * a->epochs);
    /* What the first replica (or stage) holds on its device. */
    kiln_memory_report mem = {.struct_size = sizeof mem};
    if (st == KILN_OK && kiln_model_memory(m, 0, &mem) == KILN_OK)
        say(a, "device memory, replica 0: %.1f MiB now, %.1f MiB at peak (parameters %.1f, "
               "gradients %.1f, optimizer %.1f, activations %.1f for %d samples, workspace "
               "%.1f)\n", mem.device_bytes / 1048576.0, mem.device_peak_bytes / 1048576.0,
               mem.parameter_bytes / 1048576.0, mem.gradient_bytes / 1048576.0,
               mem.optimizer_bytes / 1048576.0, mem.activation_bytes / 1048576.0,
               (int)mem.batch_capacity, mem.workspace_bytes / 1048576.0);
    if (st == KILN_OK)   /* the same in bytes, for test/bench/memory.sh */
        say(a, "device memory bytes: parameters %llu, gradients %llu, optimizer %llu, "
               "activations %llu, workspace %llu, peak %llu\n",
            (unsigned long long)mem.parameter_bytes, (unsigned long long)mem.gradient_bytes,
            (unsigned long long)mem.optimizer_bytes, (unsigned long long)mem.activation_bytes,
            (unsigned long long)mem.workspace_bytes, (unsigned long long)mem.device_peak_bytes);
    if (batches && fclose(batches) != 0 && st == KILN_OK)
        st = KILN_ERROR_IO;
    if (steps_log.f && fclose(steps_log.f) != 0 && st == KILN_OK)
        st = KILN_ERROR_IO;
    if (st == KILN_OK && a->dump) {
        char path[4096];
        snprintf(path, sizeof path, "%s/final.safetensors", a->dump);
        st = kiln_model_save_weights(m, path);
    }
    if (st == KILN_OK && a->save && (st = kiln_model_save(m, a->save)) == KILN_OK)
        say(a, "saved %s%s\n", a->save, a->lora ? " (LoRA merged into the kernels)" : "");
    kiln_dataset_destroy(val);
    return st;
}

int main(int argc, char **argv)
{
    args a;
    const int parsed = parse_args(argc, argv, &a);
    if (parsed <= 0)
        return parsed < 0 ? 0 : 2;
    if (a.devices)
        setenv("KILN_DEVICES", a.devices, 1);
    stream tr = {0}, va = {0};
    size_t files = 0;
    if (!load_text(a.text, &tr, &va, &files) || tr.n <= a.context || va.n <= a.context) {
        fprintf(stderr, "char_lm: could not read enough *.py text under %s\n", a.text);
        return 1;
    }
    char err[1024] = "";
    kiln_context_options co = {.struct_size = sizeof co, .seed = a.seed, .error_buffer = err,
                               .error_buffer_size = sizeof err, .log_level = KILN_LOG_WARNING};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        return fprintf(stderr, "char_lm: %s\n", err), 1;
    kiln_model *m = decoder(ctx, &a);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .kind = KILN_OPTIMIZER_ADAM,
                                         .learning_rate = a.lr, .use_ema = a.ema > 0.0f,
                                         .ema_momentum = a.ema};
    const kiln_compile_options opts = {.struct_size = sizeof opts,
                                       .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                       .optimizer = &adam, .activation_storage = a.storage};
    kiln_status st = m ? kiln_model_compile(m, &opts) : KILN_ERROR_OUT_OF_MEMORY;
    if (st == KILN_OK && a.init)
        st = init_from(m, ctx, &a, &opts);
    int32_t rank = 0;
    if (st == KILN_OK)
        st = kiln_model_rank(m, &rank, NULL);
    a.quiet = rank != 0;
    if (a.quiet)
        a.dump = NULL;
    say(&a, "text: %zu files under %s, %lld training and %lld validation characters\n", files,
        a.text, (long long)tr.n, (long long)va.n);
    say(&a, "unigram baseline: %.4f bits/char\n", unigram_bits(&tr));
    if (st == KILN_OK)
        st = print_setup(m, &a);
    if (st == KILN_OK)
        st = train(m, ctx, &tr, &va, &a);
    uint64_t rng = a.seed ^ 0x5eed5eedull;
    if (st == KILN_OK && a.generate > 0)
        st = generate(m, &a, &rng);
    if (st != KILN_OK)
        fprintf(stderr, "char_lm: %s: %s\n", kiln_status_name(st), kiln_context_last_error(ctx));
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    free(tr.ids);
    free(va.ids);
    return st == KILN_OK ? 0 : 1;
}
