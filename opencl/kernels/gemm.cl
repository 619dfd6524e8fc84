/* kiln's own GEMM, C = alpha op(A) B + beta C, row-major, for B small
 * enough to stay in cache (blas.c decides). Each work-item computes a
 * 4-row by 8-column tile of C with float8 accumulators (kiln_load8,
 * prelude.cl), over a (column blocks, row blocks) range: B's rows are read
 * as vectors, A's values broadcast. No local memory and no blocking over
 * k: simple, and on the devices measured faster than CLBlast on such shapes
 * (README). */

inline void kiln_gemm_store_tile(__global float *c, int c_offset, int ldc, int i0, int j0,
                                 int rows, int cols, float alpha, float beta, float8 acc0,
                                 float8 acc1, float8 acc2, float8 acc3)
{
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
    const int j0 = get_global_id(0) * 8, i0 = get_global_id(1) * 4;
    if (j0 >= n || i0 >= m)
        return;
    const int cols = n - j0, rows = min(4, m - i0);
    __global const float *ar = a + a_offset + (size_t)i0 * lda;
    __global const float *bc = b + b_offset + j0;
    float8 acc0 = (float8)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    /* Rows past m read row i0 again (in bounds); their sums are not stored. */
    const int r1 = rows > 1 ? lda : 0, r2 = rows > 2 ? 2 * lda : 0, r3 = rows > 3 ? 3 * lda : 0;
    for (int l = 0; l < k; l++) {
        const float8 v = kiln_load8(bc + (size_t)l * ldb, cols);
        acc0 += ar[l] * v;
        acc1 += ar[r1 + l] * v;
        acc2 += ar[r2 + l] * v;
        acc3 += ar[r3 + l] * v;
    }
    kiln_gemm_store_tile(c, c_offset, ldc, i0, j0, rows, cols, alpha, beta, acc0, acc1, acc2,
                         acc3);
}

/* A is stored k x m and used transposed: a tile's 4 rows of A^T are 4
 * neighbouring values of one row of A (the weight gradient x^T dy reads x
 * as it lies, with no transposed copy). */
__kernel void kiln_gemm_tn(int m, int n, int k, float alpha, __global const float *a,
                           int a_offset, int lda, __global const float *b, int b_offset,
                           int ldb, float beta, __global float *c, int c_offset, int ldc)
{
    const int j0 = get_global_id(0) * 8, i0 = get_global_id(1) * 4;
    if (j0 >= n || i0 >= m)
        return;
    const int cols = n - j0, rows = min(4, m - i0);
    __global const float *ac = a + a_offset + i0;
    __global const float *bc = b + b_offset + j0;
    float8 acc0 = (float8)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    /* Columns past m read column i0 again (in bounds); not stored. */
    const int r1 = rows > 1 ? 1 : 0, r2 = rows > 2 ? 2 : 0, r3 = rows > 3 ? 3 : 0;
    for (int l = 0; l < k; l++) {
        __global const float *x = ac + (size_t)l * lda;
        const float8 v = kiln_load8(bc + (size_t)l * ldb, cols);
        acc0 += x[0] * v;
        acc1 += x[r1] * v;
        acc2 += x[r2] * v;
        acc3 += x[r3] * v;
    }
    kiln_gemm_store_tile(c, c_offset, ldc, i0, j0, rows, cols, alpha, beta, acc0, acc1, acc2,
                         acc3);
}
