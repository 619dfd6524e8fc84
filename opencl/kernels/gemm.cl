/* kiln's own GEMM, C = alpha op(A) B + beta C, row-major, for B small
 * enough to stay in cache (blas.c decides). In the CPU variant (_cpu) each
 * work-item computes a 4-row by 16-column tile of C, two float8
 * accumulators a row (kiln_load8, prelude.cl), over a (column blocks, row
 * blocks) range: B's rows are read as vectors, A's values broadcast, each
 * broadcast feeding two multiplies.
 * (4 x 8 tiles, one accumulator a row, took 1.8 times as long over the
 * char LM's GEMMs; one float16 accumulator a row, twice as long: PoCL
 * splits it badly.) No local memory and no blocking over k: simple, and on
 * the devices measured faster than CLBlast on such shapes (docs/benchmarks.md). */

/* The 4 x k block of op(A) starts at `a`; the element of its row r at step
 * l lies at a[r * row_step + l * k_step]: NN walks rows of A (row_step
 * lda, k_step 1), TN walks down columns (1, lda). Both kernels pass their
 * steps as constants, so each compiles to its own loop. */
#define GEMM_TILE_STEP(load_lo, load_hi)                                                       \
    for (int l = 0; l < k; l++) {                                                              \
        __global const float *x = ar + (size_t)l * k_step;                                     \
        __global const float *y = bc + (size_t)l * ldb;                                        \
        const float8 v = load_lo, w = load_hi;                                                 \
        const float x0 = x[0], x1 = x[r1], x2 = x[r2], x3 = x[r3];                             \
        lo0 += x0 * v; hi0 += x0 * w;                                                          \
        lo1 += x1 * v; hi1 += x1 * w;                                                          \
        lo2 += x2 * v; hi2 += x2 * w;                                                          \
        lo3 += x3 * v; hi3 += x3 * w;                                                          \
    }

inline void kiln_gemm_tile(int m, int n, int k, float alpha, __global const float *a,
                           int row_step, int k_step, __global const float *b, int b_offset,
                           int ldb, float beta, __global float *c, int c_offset, int ldc)
{
    const int j0 = get_global_id(0) * 16, i0 = get_global_id(1) * 4;
    if (j0 >= n || i0 >= m)
        return;
    const int cols = n - j0, rows = min(4, m - i0);
    __global const float *ar = a + (size_t)i0 * row_step;
    __global const float *bc = b + b_offset + j0;
    float8 lo0 = (float8)(0.0f), lo1 = lo0, lo2 = lo0, lo3 = lo0;
    float8 hi0 = lo0, hi1 = lo0, hi2 = lo0, hi3 = lo0;
    /* Rows past m read row i0 again (in bounds); their sums are not stored. */
    const int r1 = rows > 1 ? row_step : 0, r2 = rows > 2 ? 2 * row_step : 0;
    const int r3 = rows > 3 ? 3 * row_step : 0;
    if (cols >= 16)   /* the common case: whole vectors, no count checks */
        GEMM_TILE_STEP(vload8(0, y), vload8(1, y))
    else if (cols > 8)
        GEMM_TILE_STEP(vload8(0, y), kiln_load8(y + 8, cols - 8))
    else   /* the high half is zero and not stored */
        GEMM_TILE_STEP(kiln_load8(y, cols), (float8)(0.0f))
    const float8 lo[4] = {lo0, lo1, lo2, lo3}, hi[4] = {hi0, hi1, hi2, hi3};
    for (int r = 0; r < rows; r++) {
        __global float *dst = c + c_offset + (size_t)(i0 + r) * ldc + j0;
        float8 out = alpha * lo[r];
        if (beta != 0.0f)
            out += beta * kiln_load8(dst, cols);
        kiln_store8(dst, out, cols);
        if (cols > 8) {
            out = alpha * hi[r];
            if (beta != 0.0f)
                out += beta * kiln_load8(dst + 8, cols - 8);
            kiln_store8(dst + 8, out, cols - 8);
        }
    }
}

/* Batched GEMMs (kiln_gemm_batched) run one product per index of the
 * range's third dimension, each operand `stride` floats after the one
 * before; a single GEMM runs a 2-D range, index 0. */
#define GEMM_BATCH_OFFSETS(index)                                                              \
    a += (size_t)(index) * a_stride;                                                           \
    b += (size_t)(index) * b_stride;                                                           \
    c += (size_t)(index) * c_stride

/* A is m x k. */
__kernel void kiln_gemm_nn_cpu(int m, int n, int k, float alpha, __global const float *a,
                               int a_offset, int lda, __global const float *b, int b_offset,
                               int ldb, float beta, __global float *c, int c_offset, int ldc,
                               int a_stride, int b_stride, int c_stride)
{
    GEMM_BATCH_OFFSETS(get_global_id(2));
    kiln_gemm_tile(m, n, k, alpha, a + a_offset, lda, 1, b, b_offset, ldb, beta, c, c_offset,
                   ldc);
}

/* TN on a CPU: A is stored k x m and used transposed (the weight gradient
 * x^T dy reads x as it lies, with no transposed copy), and k, the pixels
 * of a batch, runs to 10^5 while m and n are a few hundred. A work-item
 * computes an 8-row by 16-column tile over one chunk of `chunk_k` steps of
 * k: the tiles of a chunk, which run one after another, find its rows of
 * A and B in the core's cache, where a tile over the whole of k streamed
 * them from memory once per tile. Each step reads 8 neighbouring values
 * of a row of A and two float8 of B for 16 multiply-adds into 16 float8
 * accumulators. The range is (column tiles, row tiles, products x chunks);
 * with one chunk the tile is C's (alpha and beta applied), otherwise its
 * chunk's block of `partials` (m x n a chunk, a product's chunks in
 * order), which kiln_gemm_sum_chunks adds up. */
#define TN_ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7)
#define TN_DECLARE(r) float8 lo##r = (float8)(0.0f), hi##r = (float8)(0.0f);
#define TN_ADD(r)                                                                              \
    {                                                                                          \
        const float s = x[r];                                                                  \
        lo##r += s * v;                                                                        \
        hi##r += s * w;                                                                        \
    }
#define TN_STORE(r)                                                                            \
    if (r < rows) {                                                                            \
        __global float *dst = out + (size_t)(i0 + r) * ld_out + j0;                           \
        float8 o = scale * lo##r;                                                              \
        if (keep != 0.0f)                                                                      \
            o += keep * kiln_load8(dst, cols);                                                 \
        kiln_store8(dst, o, cols);                                                             \
        if (cols > 8) {                                                                        \
            o = scale * hi##r;                                                                 \
            if (keep != 0.0f)                                                                  \
                o += keep * kiln_load8(dst + 8, cols - 8);                                     \
            kiln_store8(dst + 8, o, cols - 8);                                                 \
        }                                                                                      \
    }

__kernel void kiln_gemm_tn_chunks(int m, int n, int k, int chunk_k, int chunks, float alpha,
                                  __global const float *a, int a_offset, int lda, int a_stride,
                                  __global const float *b, int b_offset, int ldb, int b_stride,
                                  float beta, __global float *c, int c_offset, int ldc,
                                  int c_stride, __global float *partials)
{
    const int j0 = get_global_id(0) * 16, i0 = get_global_id(1) * 8;
    const int product = get_global_id(2) / chunks, chunk = get_global_id(2) % chunks;
    if (j0 >= n || i0 >= m)
        return;
    const int cols = n - j0, rows = min(8, m - i0);
    const int l0 = chunk * chunk_k, l1 = min(k, l0 + chunk_k);
    a += a_offset + (size_t)product * a_stride + i0;
    b += b_offset + (size_t)product * b_stride + j0;
    TN_ROWS(TN_DECLARE)
    if (rows == 8 && cols >= 16) {   /* the common case: no count checks */
        for (int l = l0; l < l1; l++) {
            __global const float *x = a + (size_t)l * lda;
            __global const float *y = b + (size_t)l * ldb;
            const float8 v = vload8(0, y), w = vload8(1, y);
            TN_ROWS(TN_ADD)
        }
    } else {   /* rows past m and columns past n read as zeros, not stored */
        for (int l = l0; l < l1; l++) {
            float x[8];
            for (int r = 0; r < 8; r++)
                x[r] = r < rows ? a[(size_t)l * lda + r] : 0.0f;
            __global const float *y = b + (size_t)l * ldb;
            const float8 v = kiln_load8(y, cols);
            const float8 w = cols > 8 ? kiln_load8(y + 8, cols - 8) : (float8)(0.0f);
            TN_ROWS(TN_ADD)
        }
    }
    __global float *out;
    int ld_out;
    float scale, keep;
    if (chunks == 1) {
        out = c + c_offset + (size_t)product * c_stride;
        ld_out = ldc;
        scale = alpha;
        keep = beta;
    } else {
        out = partials + ((size_t)product * chunks + chunk) * (size_t)m * n;
        ld_out = n;
        scale = 1.0f;
        keep = 0.0f;
    }
    TN_ROWS(TN_STORE)
}

/* C = alpha (the sum of a product's chunks, in chunk order, so that every
 * run adds the same way) + beta C, eight columns a work-item over (column
 * blocks, rows, products). */
__kernel void kiln_gemm_sum_chunks(int m, int n, int chunks, float alpha,
                                   __global const float *partials, float beta,
                                   __global float *c, int c_offset, int ldc, int c_stride)
{
    const int j = get_global_id(0) * 8, i = get_global_id(1), product = get_global_id(2);
    if (j >= n || i >= m)
        return;
    const int cols = n - j;
    __global const float *p = partials + (size_t)product * chunks * m * n + (size_t)i * n + j;
    float8 sum = kiln_load8(p, cols);
    for (int chunk = 1; chunk < chunks; chunk++)
        sum += kiln_load8(p + (size_t)chunk * m * n, cols);
    __global float *dst = c + c_offset + (size_t)product * c_stride + (size_t)i * ldc + j;
    float8 out = alpha * sum;
    if (beta != 0.0f)
        out += beta * kiln_load8(dst, cols);
    kiln_store8(dst, out, cols);
}

/* The GPU variant (_gpu; kiln_device.gpu_kernels): work-groups of 16 x 16
 * items compute a 64 x 64 block of C, each item 4 x 4 of it at a stride
 * of 16 (so that neighbouring items store neighbouring columns), over
 * steps of 16 along k whose blocks of op(A) and B the group first copies
 * to local memory with neighbouring items reading neighbouring addresses.
 * Out-of-range elements are copied as zeros. Launched on groups of exactly
 * GEMM_GROUP x GEMM_GROUP (blas.c). */
#define GEMM_GROUP 16
#define GEMM_BLOCK 64
#define GEMM_STEP 16
/* The row length of the staged block of op(A): one float more than the
 * block, so that the NN copy, whose neighbouring items write 64 floats
 * apart, spreads them over the banks of local memory instead of landing
 * 16 on one. */
#define GEMM_A_ROW (GEMM_BLOCK + 1)

/* Copies op(A)[i0 .. i0 + 64, l0 .. l0 + 16) into `as`, k-major, rows of
 * GEMM_A_ROW. */
inline void gemm_stage_a(__local float *as, int m, int k, __global const float *a, int lda,
                         int transposed, int i0, int l0, int t)
{
    for (int e = t; e < GEMM_BLOCK * GEMM_STEP; e += GEMM_GROUP * GEMM_GROUP) {
        /* NN reads along a row of A (k fastest), TN along a row of the
         * stored k x m A (i fastest): both consecutive in memory. */
        const int r = transposed ? e % GEMM_BLOCK : e / GEMM_STEP;
        const int l = transposed ? e / GEMM_BLOCK : e % GEMM_STEP;
        const int i = i0 + r, kk = l0 + l;
        float v = 0.0f;
        if (i < m && kk < k)
            v = transposed ? a[(size_t)kk * lda + i] : a[(size_t)i * lda + kk];
        as[l * GEMM_A_ROW + r] = v;
    }
}

/* Copies B[l0 .. l0 + 16, j0 .. j0 + 64) into `bs`. */
inline void gemm_stage_b(__local float *bs, int n, int k, __global const float *b, int ldb,
                         int j0, int l0, int t)
{
    for (int e = t; e < GEMM_BLOCK * GEMM_STEP; e += GEMM_GROUP * GEMM_GROUP) {
        const int l = e / GEMM_BLOCK, col = e % GEMM_BLOCK;
        const int j = j0 + col, kk = l0 + l;
        bs[e] = j < n && kk < k ? b[(size_t)kk * ldb + j] : 0.0f;
    }
}

inline void kiln_gemm_block(int m, int n, int k, float alpha, __global const float *a, int lda,
                            int transposed, __global const float *b, int ldb, float beta,
                            __global float *c, int ldc, __local float *as, __local float *bs)
{
    const int tx = get_local_id(0), ty = get_local_id(1), t = ty * GEMM_GROUP + tx;
    const int j0 = get_group_id(0) * GEMM_BLOCK, i0 = get_group_id(1) * GEMM_BLOCK;
    float acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int q = 0; q < 4; q++)
            acc[r][q] = 0.0f;
    for (int l0 = 0; l0 < k; l0 += GEMM_STEP) {
        gemm_stage_a(as, m, k, a, lda, transposed, i0, l0, t);
        gemm_stage_b(bs, n, k, b, ldb, j0, l0, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int l = 0; l < GEMM_STEP; l++) {
            float x[4], y[4];
            for (int r = 0; r < 4; r++)
                x[r] = as[l * GEMM_A_ROW + ty + r * GEMM_GROUP];
            for (int q = 0; q < 4; q++)
                y[q] = bs[l * GEMM_BLOCK + tx + q * GEMM_GROUP];
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++)
                    acc[r][q] += x[r] * y[q];
        }
        /* The next step overwrites what slower items may still read. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < 4; r++) {
        const int i = i0 + ty + r * GEMM_GROUP;
        for (int q = 0; q < 4; q++) {
            const int j = j0 + tx + q * GEMM_GROUP;
            if (i < m && j < n) {
                __global float *dst = c + (size_t)i * ldc + j;
                *dst = alpha * acc[r][q] + (beta != 0.0f ? beta * *dst : 0.0f);
            }
        }
    }
}

__kernel void kiln_gemm_nn_gpu(int m, int n, int k, float alpha, __global const float *a,
                               int a_offset, int lda, __global const float *b, int b_offset,
                               int ldb, float beta, __global float *c, int c_offset, int ldc,
                               int a_stride, int b_stride, int c_stride)
{
    GEMM_BATCH_OFFSETS(get_group_id(2));
    __local float as[GEMM_STEP * GEMM_A_ROW], bs[GEMM_STEP * GEMM_BLOCK];
    kiln_gemm_block(m, n, k, alpha, a + a_offset, lda, 0, b + b_offset, ldb, beta, c + c_offset,
                    ldc, as, bs);
}

__kernel void kiln_gemm_tn_gpu(int m, int n, int k, float alpha, __global const float *a,
                               int a_offset, int lda, __global const float *b, int b_offset,
                               int ldb, float beta, __global float *c, int c_offset, int ldc,
                               int a_stride, int b_stride, int c_stride)
{
    GEMM_BATCH_OFFSETS(get_group_id(2));
    __local float as[GEMM_STEP * GEMM_A_ROW], bs[GEMM_STEP * GEMM_BLOCK];
    kiln_gemm_block(m, n, k, alpha, a + a_offset, lda, 1, b + b_offset, ldb, beta, c + c_offset,
                    ldc, as, bs);
}

