/* A two-tower recommender: collaborative filtering on user and item ids.
 *   Input(user id) -> Embedding(users, D) -> Flatten \
 *                                                     Dot (--towers dot, the default)
 *   Input(item id) -> Embedding(items, D) -> Flatten /   or Concatenate -> Dense(H, relu)
 *                                                        -> Dense(1) (--towers mlp)
 * mean squared error, Adam. The ratings are synthetic, made here from a
 * seed: each user and item gets a random vector of `rank` numbers (normal,
 * variance 1 / sqrt(rank), so that a rating u . v has variance 1), and a
 * rating is u . v plus Gaussian noise of `noise`. The noise is the floor
 * no model can beat: the validation RMSE is printed beside it and beside
 * the RMSE of predicting the training mean.
 * Usage: recommender [--users N] [--items N] [--rank N] [--noise X] [--ratings N]
 *                    [--epochs N] [--batch N] [--dim D] [--hidden H] [--lr X]
 *                    [--seed N] [--towers dot|mlp] [--strategy NAME] [--devices SPEC]
 * --strategy takes what KILN_STRATEGY takes (mirrored, parameter_server, ...);
 * --devices what KILN_DEVICES takes. 90% of the ratings train, 10% validate.
 * Exits 1 when training fails or the validation RMSE is not below the mean's. */
#include "kiln.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct args {
    int32_t users, items, rank, epochs, batch, dim, hidden;
    int64_t ratings;
    double noise, lr;
    uint64_t seed;
    const char *strategy, *devices;
    int mlp;   /* the towers meet in an MLP on their concatenation, not a Dot */
} args;

static const char usage[] =
    "usage: recommender [--users N] [--items N] [--rank N] [--noise X] [--ratings N]\n"
    "                   [--epochs N] [--batch N] [--dim D] [--hidden H] [--lr X]\n"
    "                   [--seed N] [--towers dot|mlp] [--strategy NAME] [--devices SPEC]\n"
    "Trains a two-tower recommender on synthetic ratings (90% train, 10% validate)\n"
    "and prints the validation RMSE beside the noise floor and the mean's; exits 1\n"
    "unless it beats the mean. --strategy takes what KILN_STRATEGY takes (mirrored,\n"
    "parameter_server, ...), --devices what KILN_DEVICES takes.\n";

/* 1: parsed; 0: a usage error (said on stderr); -1: --help (the usage on
 * stdout). */
static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.users = 2000, .items = 1000, .rank = 8, .ratings = 100000, .noise = 0.1,
                .epochs = 40, .batch = 256, .dim = 8, .hidden = 64, .lr = 3e-3, .seed = 1};
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return fputs(usage, stdout), -1;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s needs a value\n", argv[i]);
            return 0;
        }
        if (strcmp(argv[i], "--users") == 0)
            a->users = atoi(v);
        else if (strcmp(argv[i], "--items") == 0)
            a->items = atoi(v);
        else if (strcmp(argv[i], "--rank") == 0)
            a->rank = atoi(v);
        else if (strcmp(argv[i], "--noise") == 0)
            a->noise = atof(v);
        else if (strcmp(argv[i], "--ratings") == 0)
            a->ratings = atoll(v);
        else if (strcmp(argv[i], "--epochs") == 0)
            a->epochs = atoi(v);
        else if (strcmp(argv[i], "--batch") == 0)
            a->batch = atoi(v);
        else if (strcmp(argv[i], "--dim") == 0)
            a->dim = atoi(v);
        else if (strcmp(argv[i], "--hidden") == 0)
            a->hidden = atoi(v);
        else if (strcmp(argv[i], "--lr") == 0)
            a->lr = atof(v);
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = strtoull(v, NULL, 10);
        else if (strcmp(argv[i], "--towers") == 0 &&
                 (strcmp(v, "dot") == 0 || strcmp(v, "mlp") == 0))
            a->mlp = strcmp(v, "mlp") == 0;
        else if (strcmp(argv[i], "--strategy") == 0)
            a->strategy = v;
        else if (strcmp(argv[i], "--devices") == 0)
            a->devices = v;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 0;
        }
    }
    if (a->users < 1 || a->items < 1 || a->rank < 1 || a->ratings < 20 || a->noise < 0 ||
        a->epochs < 1 || a->batch < 1 || a->dim < 1 || a->hidden < 1 || !(a->lr > 0)) {
        fprintf(stderr, "recommender: sizes must be >= 1 (ratings >= 20), noise >= 0, lr > 0\n");
        return 0;
    }
    return 1;
}

/* splitmix64: the example's own generator, so the data depend on the seed only. */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return ((double)(next(s) >> 11) + 0.5) / 9007199254740992.0;   /* (0, 1) */
}

static double gaussian(uint64_t *s)
{
    return sqrt(-2.0 * log(uniform(s))) * cos(6.283185307179586 * uniform(s));
}

typedef struct ratings {
    int32_t *user, *item;
    float *rating;
} ratings;

/* Planted rank-`rank` structure plus noise; pairs drawn uniformly. */
static int make_ratings(const args *a, ratings *r)
{
    uint64_t s = a->seed;
    const double sd = pow((double)a->rank, -0.25);   /* per-component: u . v has variance 1 */
    double *u = malloc((size_t)a->users * (size_t)a->rank * sizeof *u);
    double *v = malloc((size_t)a->items * (size_t)a->rank * sizeof *v);
    r->user = malloc((size_t)a->ratings * sizeof *r->user);
    r->item = malloc((size_t)a->ratings * sizeof *r->item);
    r->rating = malloc((size_t)a->ratings * sizeof *r->rating);
    if (!u || !v || !r->user || !r->item || !r->rating) {
        free(u), free(v);
        return 0;
    }
    for (int64_t i = 0; i < (int64_t)a->users * a->rank; i++)
        u[i] = sd * gaussian(&s);
    for (int64_t i = 0; i < (int64_t)a->items * a->rank; i++)
        v[i] = sd * gaussian(&s);
    for (int64_t k = 0; k < a->ratings; k++) {
        const int32_t i = (int32_t)(next(&s) % (uint64_t)a->users);
        const int32_t j = (int32_t)(next(&s) % (uint64_t)a->items);
        double dot = 0;
        for (int32_t c = 0; c < a->rank; c++)
            dot += u[(int64_t)i * a->rank + c] * v[(int64_t)j * a->rank + c];
        r->user[k] = i;
        r->item[k] = j;
        r->rating[k] = (float)(dot + a->noise * gaussian(&s));
    }
    free(u), free(v);
    return 1;
}

/* Ratings [first, first + count) as a dataset of two id inputs. */
static kiln_status ratings_dataset(kiln_context *ctx, const ratings *r, int64_t first,
                                   int64_t count, kiln_dataset **out)
{
    const kiln_input_array in[2] = {
        {.rank = 1, .dims = {1}, .int_features = r->user + first},
        {.rank = 1, .dims = {1}, .int_features = r->item + first}};
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = count,
                                .label_kind = KILN_LABELS_DENSE, .label_size = 1,
                                .dense_labels = r->rating + first, .n_inputs = 2, .inputs = in};
    return kiln_dataset_from_arrays(ctx, &d, out);
}

static kiln_model *two_towers(kiln_context *ctx, const args *a)
{
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m) != KILN_OK)
        return NULL;
    const int32_t one[] = {1};
    const kiln_embedding_options ue = {.struct_size = sizeof ue, .input_dim = a->users,
                                       .output_dim = a->dim, .name = "user_embedding"};
    const kiln_embedding_options ie = {.struct_size = sizeof ie, .input_dim = a->items,
                                       .output_dim = a->dim, .name = "item_embedding"};
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = a->hidden,
                                       .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options rating = {.struct_size = sizeof rating, .units = 1,
                                       .name = "rating"};
    /* One statement per tower: the order the Inputs are declared in is the
     * model's input order (C leaves the order of an initialiser's calls open). */
    const kiln_input_options user = {.struct_size = sizeof user, .name = "user"};
    const kiln_input_options item = {.struct_size = sizeof item, .name = "item"};
    kiln_node towers[2];
    towers[0] = kiln_flatten(m, kiln_embedding(m, kiln_input_ints(m, 1, one, &user), &ue), NULL);
    towers[1] = kiln_flatten(m, kiln_embedding(m, kiln_input_ints(m, 1, one, &item), &ie), NULL);
    if (a->mlp)
        kiln_dense(m, kiln_dense(m, kiln_concatenate(m, towers, 2, NULL), &hidden), &rating);
    else
        kiln_dot(m, towers[0], towers[1], &(kiln_dot_options){.name = "rating"});
    return m;   /* builder errors surface at compile */
}

int main(int argc, char **argv)
{
    args a;
    const int parsed = parse_args(argc, argv, &a);
    if (parsed <= 0)
        return parsed < 0 ? 0 : 2;
    if (a.strategy)
        setenv("KILN_STRATEGY", a.strategy, 1);
    if (a.devices)
        setenv("KILN_DEVICES", a.devices, 1);
    ratings r = {0};
    if (!make_ratings(&a, &r)) {
        fprintf(stderr, "recommender: %lld ratings do not fit in memory\n",
                (long long)a.ratings);
        return 1;
    }
    const int64_t n_train = a.ratings * 9 / 10, n_val = a.ratings - n_train;
    double mean = 0, mean_sq = 0;
    for (int64_t k = 0; k < n_train; k++)
        mean += r.rating[k] / (double)n_train;
    for (int64_t k = n_train; k < a.ratings; k++)
        mean_sq += (r.rating[k] - mean) * (r.rating[k] - mean) / (double)n_val;

    kiln_context_options co = {.struct_size = sizeof co, .seed = a.seed,
                               .log_level = KILN_LOG_WARNING};
    kiln_context *ctx = NULL;
    kiln_dataset *train = NULL, *val = NULL;
    kiln_model *m = NULL;
    kiln_status st = kiln_context_create(&co, &ctx);
    if (st != KILN_OK) {
        fprintf(stderr, "recommender: no OpenCL device (%s)\n", kiln_status_name(st));
        return 1;
    }
    st = ratings_dataset(ctx, &r, 0, n_train, &train);
    if (st == KILN_OK)
        st = ratings_dataset(ctx, &r, n_train, n_val, &val);
    if (st == KILN_OK && !(m = two_towers(ctx, &a)))
        st = KILN_ERROR_OUT_OF_MEMORY;
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM,
                                              .learning_rate = (float)a.lr};
    kiln_compile_options opts = {.struct_size = sizeof opts,
                                 .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    opts.optimizer = &optimizer;
    if (st == KILN_OK)
        st = kiln_model_compile(m, &opts);
    int32_t rank = 0, replicas = 0;
    const char *strategy = "";
    if (st == KILN_OK)
        st = kiln_model_rank(m, &rank, NULL);
    if (st == KILN_OK && kiln_model_distribution(m, &strategy, &replicas) == KILN_OK &&
        rank == 0)
        printf("%d users, %d items, rank %d, noise %.3g: %lld ratings (%lld train, %lld "
               "validation); towers: %s; strategy %s, %d replica(s), batch %d\n", (int)a.users,
               (int)a.items, (int)a.rank, a.noise, (long long)a.ratings, (long long)n_train,
               (long long)n_val, a.mlp ? "mlp" : "dot", strategy, (int)replicas, (int)a.batch);
    kiln_fit_options fit = {.struct_size = sizeof fit};
    fit.epochs = a.epochs;
    fit.batch_size = a.batch;
    fit.validation = val;
    fit.verbosity = KILN_VERBOSE_EPOCH;
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    if (st == KILN_OK)
        st = kiln_model_fit(m, train, &fit);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    kiln_metrics e = {.struct_size = sizeof e};
    if (st == KILN_OK)
        st = kiln_model_evaluate(m, val, 1024, &e);
    int rc = 1;
    if (st != KILN_OK) {
        fprintf(stderr, "recommender: %s: %s\n", kiln_status_name(st),
                kiln_context_last_error(ctx));
    } else {
        const double rmse = sqrt(e.loss), baseline = sqrt(mean_sq);
        if (rank == 0) {
            printf("training: %.1f s for %d epochs\n",
                   (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec),
                   (int)a.epochs);
            printf("validation RMSE: %.4f (noise floor %.4f; predicting the mean %.4f)\n", rmse,
                   a.noise, baseline);
        }
        rc = isfinite(rmse) && rmse < baseline ? 0 : 1;
    }
    kiln_model_destroy(m);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
    kiln_context_destroy(ctx);
    free(r.user), free(r.item), free(r.rating);
    return rc;
}
