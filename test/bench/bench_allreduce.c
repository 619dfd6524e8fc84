/* All-reduce bandwidth across processes, as nccl-tests define it: run as 2
 * (or more) MPI processes (`mpirun -np 2 ./bench_allreduce`), each sums
 * SIZE MiB of floats with the others through kiln's MPI layer
 * (comm/mpi_world.c, the path multi_worker's gradients take); printed
 * beside memcpy of the same bytes in the same process, same run.
 *   algbw = bytes / time;  busbw = algbw x 2 (n - 1) / n.
 * Usage: bench_allreduce [MiB] [repeats]. Medians of the repeats. */
#include "comm/mpi_world.h"
#include "runtime/context/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    const int repeats = argc > 2 ? atoi(argv[2]) : 5;
    if (mib < 1 || repeats < 1 || repeats > 100) {
        fprintf(stderr, "usage: bench_allreduce [MiB >= 1] [repeats 1..100]\n");
        return 2;
    }
    kiln_context_options o = {.struct_size = sizeof o};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return printf("SKIP: no OpenCL device for a context\n"), 77;
    kiln_mpi *w = NULL;
    if (kiln_mpi_join(&ctx->host, &w) != KILN_OK) {
        printf("SKIP: %s\n", kiln_context_last_error(ctx));
        kiln_context_destroy(ctx);
        return 77;
    }
    const size_t n = mib * 1048576 / sizeof(float);
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    if (!x || !y)
        return fprintf(stderr, "bench_allreduce: out of memory\n"), 1;
    for (size_t i = 0; i < n; i++)
        x[i] = y[i] = (float)(i % 1000) * 1e-3f;
    double mpi_t[100], copy_t[100];
    kiln_status st = kiln_mpi_sum_floats(w, x, n, NULL, 600);   /* warm-up */
    for (int r = 0; r < repeats && st == KILN_OK; r++) {
        double t0 = kiln_now();
        st = kiln_mpi_sum_floats(w, x, n, NULL, 600);
        mpi_t[r] = kiln_now() - t0;
        t0 = kiln_now();
        memcpy(y, x, n * sizeof(float));
        copy_t[r] = kiln_now() - t0;
    }
    const int size = kiln_mpi_size(w), rank = kiln_mpi_rank(w);
    if (st == KILN_OK && rank == 0) {
        qsort(mpi_t, (size_t)repeats, sizeof(double), by_value);
        qsort(copy_t, (size_t)repeats, sizeof(double), by_value);
        const double bytes = (double)n * sizeof(float);
        const double algbw = bytes / mpi_t[repeats / 2] / 1e9;
        const double busbw = algbw * 2.0 * (size - 1) / size;
        const double copy = bytes / copy_t[repeats / 2] / 1e9;
        printf("MPI all-reduce of %zu MiB over %d processes: %.3f s, algbw %.2f GB/s, busbw "
               "%.2f GB/s; memcpy %.2f GB/s; busbw / memcpy %.2f\n", mib, size,
               mpi_t[repeats / 2], algbw, busbw, copy, busbw / copy);
    }
    if (st != KILN_OK)
        fprintf(stderr, "bench_allreduce: %s\n", kiln_context_last_error(ctx));
    free(x);
    free(y);
    kiln_mpi_leave(w);
    kiln_context_destroy(ctx);
    return st == KILN_OK ? 0 : 1;
}
