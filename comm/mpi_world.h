/* Private: kiln's use of MPI across processes (multi-worker training).
 * Everything goes through this file, so the library builds without MPI
 * (meson option `mpi`): then kiln_mpi_join reports that it is missing.
 *
 * kiln joins MPI_COMM_WORLD through a duplicate communicator whose errors
 * are returned, not fatal. If the application has not initialised MPI,
 * kiln does (MPI_THREAD_SERIALIZED: one kiln thread calls MPI at a time)
 * and finalises it when the process exits. */
#ifndef KILN_COMM_MPI_WORLD_H
#define KILN_COMM_MPI_WORLD_H

#include "base/flag.h"
#include "base/host.h"
#include "kiln.h"

typedef struct kiln_mpi kiln_mpi;

/* Joins the world; rank and size through the handle. */
kiln_status kiln_mpi_join(kiln_host *host, kiln_mpi **out);
void kiln_mpi_leave(kiln_mpi *w);   /* accepts NULL */

int kiln_mpi_rank(const kiln_mpi *w);
int kiln_mpi_size(const kiln_mpi *w);

/* In-place sum over every rank of n floats (or doubles). Polls so that
 * *cancel (when not NULL) set by another thread makes it give up with
 * KILN_ERROR_STOPPED, and gives up with KILN_ERROR_TIMEOUT after
 * `timeout` seconds (<= 0: never). */
kiln_status kiln_mpi_sum_floats(kiln_mpi *w, float *x, size_t n, const kiln_flag *cancel,
                                double timeout);
kiln_status kiln_mpi_sum_doubles(kiln_mpi *w, double *x, size_t n, double timeout);

/* After a failed or abandoned collective the job cannot finish MPI
 * properly (MPI_Finalize would wait for it): kiln then leaves MPI
 * unfinalised at exit. Called by kiln on such failures. */
void kiln_mpi_abandon(void);

/* The job is misconfigured unless every rank passes the same n (at most
 * 16) values: the first that differs gives KILN_ERROR_INVALID_ARGUMENT,
 * "<call>: every process of the MPI job must have the same <names[i]>",
 * with this rank's value and the range over the ranks (a name starting with
 * '#' is a hash's: the '#' is dropped and no value shown). A collective:
 * every rank calls it with the same n. */
kiln_status kiln_mpi_check_same(kiln_mpi *w, const char *call, const char *const *names,
                                const int64_t *values, int n, double timeout);

/* Rank 0's n floats to every rank. */
kiln_status kiln_mpi_broadcast(kiln_mpi *w, float *x, size_t n, double timeout);

/* Point to point (the parameter server): n floats (or doubles) to rank
 * `dest` with `tag`; and a receive from `source` (-1: any) with `tag` (-1:
 * any), telling which rank and tag it came from. Both poll like the sums;
 * the receive gives up with KILN_ERROR_STOPPED when *cancel is set. */
kiln_status kiln_mpi_send(kiln_mpi *w, int dest, int tag, const void *x, size_t n, int doubles,
                          double timeout);
kiln_status kiln_mpi_receive(kiln_mpi *w, int source, int tag, void *x, size_t n, int doubles,
                             int *from, int *got_tag, const kiln_flag *cancel,
                             double timeout);

/* Every rank's `counts[r]` floats, concatenated in rank order into `all`;
 * `mine` is this rank's part. */
kiln_status kiln_mpi_gather_all(kiln_mpi *w, const float *mine, const int *counts, float *all,
                                double timeout);

#endif
