/* kiln's own GEMM, C = alpha op(A) B + beta C, row-major, for B small
 * enough to stay in cache (blas.c decides). Each work-item computes a
 * 4-row by 8-column tile of C with float8 accumulators (kiln_load8,
 * prelude.cl), over a (column blocks, row blocks) range: B's rows are read
 * as vectors, A's values broadcast. No local memory and no blocking over
 * k: simple, and on the devices measured faster than CLBlast on such shapes
 * (README). */

/* One tile of C. The 4 x k block of op(A) starts at `a`; the element of
 * its row r at step l lies at a[r * row_step + l * k_step]: NN walks rows
 * of A (row_step lda, k_step 1), TN walks down columns (1, lda). Both
 * kernels pass their steps as constants, so each compiles to its own loop. */
inline void kiln_gemm_tile(int m, int n, int k, float alpha, __global const float *a,
                           int row_step, int k_step, __global const float *b, int b_offset,
                           int ldb, float beta, __global float *c, int c_offset, int ldc)
{
    const int j0 = get_global_id(0) * 8, i0 = get_global_id(1) * 4;
    if (j0 >= n || i0 >= m)
        return;
    const int cols = n - j0, rows = min(4, m - i0);
    __global const float *ar = a + (size_t)i0 * row_step;
    __global const float *bc = b + b_offset + j0;
    float8 acc0 = (float8)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    /* Rows past m read row i0 again (in bounds); their sums are not stored. */
    const int r1 = rows > 1 ? row_step : 0, r2 = rows > 2 ? 2 * row_step : 0;
    const int r3 = rows > 3 ? 3 * row_step : 0;
    for (int l = 0; l < k; l++) {
        __global const float *x = ar + (size_t)l * k_step;
        const float8 v = kiln_load8(bc + (size_t)l * ldb, cols);
        acc0 += x[0] * v;
        acc1 += x[r1] * v;
        acc2 += x[r2] * v;
        acc3 += x[r3] * v;
    }
    const float8 acc[4] = {acc0, acc1, acc2, acc3};
    for (int r = 0; r < rows; r++) {
        __global float *dst = c + c_offset + (size_t)(i0 + r) * ldc + j0;
        float8 out = alpha * acc[r];
        if (beta != 0.0f)
            out += beta * kiln_load8(dst, cols);
        kiln_store8(dst, out, cols);
    }
}

/* A is m x k. */
__kernel void kiln_gemm_nn(int m, int n, int k, float alpha, __global const float *a,
                           int a_offset, int lda, __global const float *b, int b_offset,
                           int ldb, float beta, __global float *c, int c_offset, int ldc)
{
    kiln_gemm_tile(m, n, k, alpha, a + a_offset, lda, 1, b, b_offset, ldb, beta, c, c_offset,
                   ldc);
}

/* A is stored k x m and used transposed: a tile's 4 rows of A^T are 4
 * neighbouring values of one row of A (the weight gradient x^T dy reads x
 * as it lies, with no transposed copy). */
__kernel void kiln_gemm_tn(int m, int n, int k, float alpha, __global const float *a,
                           int a_offset, int lda, __global const float *b, int b_offset,
                           int ldb, float beta, __global float *c, int c_offset, int ldc)
{
    kiln_gemm_tile(m, n, k, alpha, a + a_offset, 1, lda, b, b_offset, ldb, beta, c, c_offset,
                   ldc);
}
