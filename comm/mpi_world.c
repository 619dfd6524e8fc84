#include "comm/mpi_world.h"

#include "kiln_config.h"
#include "base/clock.h"
#include "base/host.h"

#if KILN_HAVE_MPI

#include <mpi.h>

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kiln_mpi {
    kiln_host *host;
    MPI_Comm comm;
    int rank, size;
};

/* Whether kiln initialised MPI: then it finalises it when the process
 * exits (MPI cannot be initialised twice in a process, so not when the
 * last model leaves). MPI calls are serialised through `lock`. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int kiln_initialised, abandoned;

static void finalize_at_exit(void)
{
    int done = 0;
    if (kiln_initialised && !abandoned && MPI_Finalized(&done) == MPI_SUCCESS && !done)
        MPI_Finalize();
}

void kiln_mpi_abandon(void)
{
    pthread_mutex_lock(&lock);
    abandoned = 1;
    pthread_mutex_unlock(&lock);
}

static kiln_status mpi_fail(kiln_host *host, const char *call, int err)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, text, &len);
    return kiln_fail(host, KILN_ERROR_DEVICE, "%s failed: %s", call, text);
}

kiln_status kiln_mpi_join(kiln_host *host, kiln_mpi **out)
{
    *out = NULL;
    kiln_mpi *w = kiln_host_calloc(host, 1, sizeof *w);
    if (!w)
        return kiln_fail_oom(host, "an MPI handle", sizeof *w);
    w->host = host;
    pthread_mutex_lock(&lock);
    int ready = 0, err = MPI_Initialized(&ready);
    if (err == MPI_SUCCESS && !ready) {
        int provided = 0;
        err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (err == MPI_SUCCESS && provided < MPI_THREAD_SERIALIZED) {
            pthread_mutex_unlock(&lock);
            kiln_host_free(host, w);
            return kiln_fail(host, KILN_ERROR_UNSUPPORTED,
                             "MPI provides thread level %d; kiln needs "
                             "MPI_THREAD_SERIALIZED (%d)", provided, MPI_THREAD_SERIALIZED);
        }
        kiln_initialised = err == MPI_SUCCESS;
        if (kiln_initialised)
            atexit(finalize_at_exit);
    }
    if (err == MPI_SUCCESS)
        err = MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_rank(w->comm, &w->rank);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_size(w->comm, &w->size);
    pthread_mutex_unlock(&lock);
    if (err != MPI_SUCCESS) {
        kiln_host_free(host, w);
        return mpi_fail(host, "joining MPI_COMM_WORLD", err);
    }
    *out = w;
    return KILN_OK;
}

void kiln_mpi_leave(kiln_mpi *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&lock);
    MPI_Comm_free(&w->comm);
    pthread_mutex_unlock(&lock);
    kiln_host_free(w->host, w);
}

int kiln_mpi_rank(const kiln_mpi *w)
{
    return w->rank;
}

int kiln_mpi_size(const kiln_mpi *w)
{
    return w->size;
}

/* Waits for a non-blocking request, polling cancel and the deadline. A
 * request given up on is left to MPI (the job is broken by then). */
static kiln_status finish(kiln_mpi *w, MPI_Request *req, const char *what,
                          const kiln_flag *cancel, double timeout)
{
    const kiln_deadline deadline = kiln_deadline_in(timeout);
    const struct timespec tick = {0, 100000};
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&lock);
        const int err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        pthread_mutex_unlock(&lock);
        if (err != MPI_SUCCESS) {
            kiln_mpi_abandon();
            return mpi_fail(w->host, what, err);
        }
        if (done)
            return KILN_OK;
        if (kiln_flag_up(cancel) || kiln_deadline_passed(deadline))
            kiln_mpi_abandon();
        if (kiln_flag_up(cancel))   /* kiln gave up after reporting why: keep that message */
            return KILN_ERROR_STOPPED;
        if (kiln_deadline_passed(deadline))
            return kiln_fail(w->host, KILN_ERROR_TIMEOUT,
                             "%s: rank %d of %d waited %.1f s for the other ranks; one of "
                             "them has stalled or died", what, w->rank, w->size, timeout);
        nanosleep(&tick, NULL);
    }
}

static kiln_status sum(kiln_mpi *w, void *x, size_t n, MPI_Datatype type, const char *what,
                       const kiln_flag *cancel, double timeout)
{
    if (n > (size_t)INT32_MAX)
        return kiln_fail(w->host, KILN_ERROR_UNSUPPORTED, "%s: %zu values", what, n);
    MPI_Request req;
    pthread_mutex_lock(&lock);
    const int err = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, type, MPI_SUM, w->comm, &req);
    pthread_mutex_unlock(&lock);
    if (err != MPI_SUCCESS)
        return mpi_fail(w->host, what, err);
    return finish(w, &req, what, cancel, timeout);
}

kiln_status kiln_mpi_sum_floats(kiln_mpi *w, float *x, size_t n, const kiln_flag *cancel,
                                double timeout)
{
    return sum(w, x, n, MPI_FLOAT, "MPI all-reduce of gradients", cancel, timeout);
}

kiln_status kiln_mpi_sum_doubles(kiln_mpi *w, double *x, size_t n, double timeout)
{
    return sum(w, x, n, MPI_DOUBLE, "MPI all-reduce of metrics", NULL, timeout);
}

kiln_status kiln_mpi_check_same(kiln_mpi *w, const char *call, const char *const *names,
                                const int64_t *values, int n, double timeout)
{
    enum { MOST = 16 };
    assert(n > 0 && n <= MOST);
    int64_t low[MOST], high[MOST];
    memcpy(low, values, (size_t)n * sizeof *values);
    memcpy(high, values, (size_t)n * sizeof *values);
    MPI_Request req[2];
    pthread_mutex_lock(&lock);
    int err = MPI_Iallreduce(MPI_IN_PLACE, low, n, MPI_INT64_T, MPI_MIN, w->comm, &req[0]);
    if (err == MPI_SUCCESS)
        err = MPI_Iallreduce(MPI_IN_PLACE, high, n, MPI_INT64_T, MPI_MAX, w->comm, &req[1]);
    pthread_mutex_unlock(&lock);
    const char *what = "MPI comparison of the processes' settings";
    kiln_status st = err == MPI_SUCCESS ? finish(w, &req[0], what, NULL, timeout)
                                        : mpi_fail(w->host, what, err);
    if (st == KILN_OK)
        st = finish(w, &req[1], what, NULL, timeout);
    for (int i = 0; st == KILN_OK && i < n; i++) {
        if (low[i] == high[i])
            continue;
        if (names[i][0] == '#')   /* a hash: its digits mean nothing to a reader */
            return kiln_fail(w->host, KILN_ERROR_INVALID_ARGUMENT,
                             "%s: every process of the MPI job must have the same %s; rank %d "
                             "of %d differs from another rank", call, names[i] + 1, w->rank,
                             w->size);
        return kiln_fail(w->host, KILN_ERROR_INVALID_ARGUMENT,
                         "%s: every process of the MPI job must have the same %s; rank %d of "
                         "%d has %lld, the ranks %lld to %lld", call, names[i], w->rank,
                         w->size, (long long)values[i], (long long)low[i], (long long)high[i]);
    }
    return st;
}

kiln_status kiln_mpi_broadcast(kiln_mpi *w, float *x, size_t n, double timeout)
{
    MPI_Request req;
    pthread_mutex_lock(&lock);
    const int err = MPI_Ibcast(x, (int)n, MPI_FLOAT, 0, w->comm, &req);
    pthread_mutex_unlock(&lock);
    if (err != MPI_SUCCESS)
        return mpi_fail(w->host, "MPI broadcast of parameters", err);
    return finish(w, &req, "MPI broadcast of parameters", NULL, timeout);
}

kiln_status kiln_mpi_send(kiln_mpi *w, int dest, int tag, const void *x, size_t n, int doubles,
                          double timeout)
{
    MPI_Request req;
    pthread_mutex_lock(&lock);
    const int err = MPI_Isend(x, (int)n, doubles ? MPI_DOUBLE : MPI_FLOAT, dest, tag, w->comm,
                              &req);
    pthread_mutex_unlock(&lock);
    if (err != MPI_SUCCESS)
        return mpi_fail(w->host, "MPI send", err);
    return finish(w, &req, "MPI send to the parameter store or a worker", NULL, timeout);
}

kiln_status kiln_mpi_receive(kiln_mpi *w, int source, int tag, void *x, size_t n, int doubles,
                             int *from, int *got_tag, const kiln_flag *cancel,
                             double timeout)
{
    MPI_Request req;
    MPI_Status status;
    pthread_mutex_lock(&lock);
    int err = MPI_Irecv(x, (int)n, doubles ? MPI_DOUBLE : MPI_FLOAT,
                        source < 0 ? MPI_ANY_SOURCE : source, tag < 0 ? MPI_ANY_TAG : tag,
                        w->comm, &req);
    pthread_mutex_unlock(&lock);
    if (err != MPI_SUCCESS)
        return mpi_fail(w->host, "MPI receive", err);
    const kiln_deadline deadline = kiln_deadline_in(timeout);
    const struct timespec tick = {0, 100000};
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&lock);
        err = MPI_Test(&req, &done, &status);
        if (!done && (kiln_flag_up(cancel) || kiln_deadline_passed(deadline))) {
            MPI_Cancel(&req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
        pthread_mutex_unlock(&lock);
        if (err != MPI_SUCCESS)
            return mpi_fail(w->host, "MPI receive", err);
        if (done) {
            if (from)
                *from = status.MPI_SOURCE;
            if (got_tag)
                *got_tag = status.MPI_TAG;
            return KILN_OK;
        }
        if (kiln_flag_up(cancel))
            return KILN_ERROR_STOPPED;
        if (kiln_deadline_passed(deadline)) {
            kiln_mpi_abandon();
            return kiln_fail(w->host, KILN_ERROR_TIMEOUT,
                             "MPI receive: rank %d of %d waited %.1f s for a message; the "
                             "parameter store or a worker has stalled or died", w->rank,
                             w->size, timeout);
        }
        nanosleep(&tick, NULL);
    }
}

kiln_status kiln_mpi_gather_all(kiln_mpi *w, const float *mine, const int *counts, float *all,
                                double timeout)
{
    int *displs = kiln_host_calloc(w->host, (size_t)w->size, sizeof(int));
    if (!displs)
        return kiln_fail_oom(w->host, "MPI displacements", (size_t)w->size * sizeof(int));
    for (int r = 1; r < w->size; r++)
        displs[r] = displs[r - 1] + counts[r - 1];
    MPI_Request req;
    pthread_mutex_lock(&lock);
    const int err = MPI_Iallgatherv(mine, counts[w->rank], MPI_FLOAT, all, counts, displs,
                                    MPI_FLOAT, w->comm, &req);
    pthread_mutex_unlock(&lock);
    kiln_status st = err != MPI_SUCCESS ? mpi_fail(w->host, "MPI gather of outputs", err)
                                        : finish(w, &req, "MPI gather of outputs", NULL, timeout);
    kiln_host_free(w->host, displs);
    return st;
}

#else /* !KILN_HAVE_MPI */

struct kiln_mpi {
    int unused;
};

kiln_status kiln_mpi_join(kiln_host *host, kiln_mpi **out)
{
    *out = NULL;
    return kiln_fail(host, KILN_ERROR_UNSUPPORTED,
                     "the multi_worker strategy needs MPI, and this kiln was built without it "
                     "(meson option -Dmpi=enabled with libopenmpi-dev installed)");
}

void kiln_mpi_leave(kiln_mpi *w)
{
    (void)w;
}

void kiln_mpi_abandon(void)
{
}

int kiln_mpi_rank(const kiln_mpi *w)
{
    (void)w;
    return 0;
}

int kiln_mpi_size(const kiln_mpi *w)
{
    (void)w;
    return 1;
}

kiln_status kiln_mpi_sum_floats(kiln_mpi *w, float *x, size_t n, const kiln_flag *cancel,
                                double timeout)
{
    (void)w, (void)x, (void)n, (void)cancel, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

kiln_status kiln_mpi_sum_doubles(kiln_mpi *w, double *x, size_t n, double timeout)
{
    (void)w, (void)x, (void)n, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

kiln_status kiln_mpi_broadcast(kiln_mpi *w, float *x, size_t n, double timeout)
{
    (void)w, (void)x, (void)n, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

kiln_status kiln_mpi_check_same(kiln_mpi *w, const char *call, const char *const *names,
                                const int64_t *values, int n, double timeout)
{
    (void)w, (void)call, (void)names, (void)values, (void)n, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

kiln_status kiln_mpi_gather_all(kiln_mpi *w, const float *mine, const int *counts, float *all,
                                double timeout)
{
    (void)w, (void)mine, (void)counts, (void)all, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

kiln_status kiln_mpi_send(kiln_mpi *w, int dest, int tag, const void *x, size_t n, int doubles,
                          double timeout)
{
    (void)w, (void)dest, (void)tag, (void)x, (void)n, (void)doubles, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

kiln_status kiln_mpi_receive(kiln_mpi *w, int source, int tag, void *x, size_t n, int doubles,
                             int *from, int *got_tag, const kiln_flag *cancel,
                             double timeout)
{
    (void)w, (void)source, (void)tag, (void)x, (void)n, (void)doubles, (void)from;
    (void)got_tag, (void)cancel, (void)timeout;
    return KILN_ERROR_UNSUPPORTED;
}

#endif
