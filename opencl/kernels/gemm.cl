/* kiln's own GEMM, C = alpha op(A) B + beta C, row-major (blas.c decides
 * which GEMMs run here). The CPU variant (_cpu): a work-item computes an
 * 8-row by 32-column tile of C, two float16 accumulators a row, over one
 * chunk of `chunk_k` steps of k. Each step reads two float16 of a row of
 * B and broadcasts 8 values of op(A), each into two multiply-adds: 16
 * accumulators, which an AVX-512 CPU holds in registers. The range is (column tiles, row tiles,
 * products x chunks): the tiles of a chunk run one after another and find
 * its rows of A and B in the core's cache, where a tile over the whole of
 * a long k (a weight gradient's pixels, up to 10^5) streamed them from
 * memory once per tile. With one chunk the tile is C's (alpha and beta
 * applied); otherwise its chunk's block of `partials` (m x n a chunk, a
 * product's chunks in order), which kiln_gemm_sum_chunks adds up.
 * (4 x 16 tiles over the whole of k ran the seed ResNet's 576 x 64 x 25088
 * TN weight gradient at a quarter of this speed; 8 x 16 tiles of float8s
 * ran its 3 x 3 convolutions' NN products at 55 to 65% of this speed on
 * this project's machine.) No local memory: a CPU driver keeps it in
 * ordinary memory, where staging only adds copies. */
#define GEMM_ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7)
#define GEMM_DECLARE(r) float16 lo##r = (float16)(0.0f), hi##r = (float16)(0.0f);
/* Row r of the tile at step l: x, the step's first value, plus row r's
 * offset, `offset(r)`. */
#define GEMM_ADD(r)                                                                            \
    {                                                                                          \
        const float s = x[GEMM_OFFSET(r)];                                                     \
        lo##r += s * v;                                                                        \
        hi##r += s * w;                                                                        \
    }
#define GEMM_STORE(r)                                                                          \
    if (r < rows) {                                                                            \
        __global float *dst = out + (size_t)(i0 + r) * ld_out + j0;                           \
        float16 o = scale * lo##r;                                                             \
        if (keep != 0.0f)                                                                      \
            o += keep * kiln_load16(dst, cols);                                                \
        kiln_store16(dst, o, cols);                                                            \
        if (cols > 16) {                                                                       \
            o = scale * hi##r;                                                                 \
            if (keep != 0.0f)                                                                  \
                o += keep * kiln_load16(dst + 16, cols - 16);                                  \
            kiln_store16(dst + 16, o, cols - 16);                                              \
        }                                                                                      \
    }
/* The steps of one chunk: op(A)'s element (i0 + r, l) lies at
 * a[l * k_step + r * row_step] (NN: k_step 1, row_step lda; TN: lda, 1),
 * both constants in the common case, so each kernel compiles to its own
 * loop. Rows past m read row i0 again and columns past n zeros; neither
 * is stored. */
#define GEMM_CHUNK(k_step, row_step)                                                           \
    if (rows == 8 && cols >= 32) {                                                             \
        for (int l = l0; l < l1; l++) {                                                        \
            __global const float *x = a + (size_t)l * (k_step);                                \
            __global const float *y = b + (size_t)l * ldb;                                     \
            const float16 v = vload16(0, y), w = vload16(1, y);                                \
            GEMM_ROWS(GEMM_ADD)                                                                \
        }                                                                                      \
    } else {                                                                                   \
        const int step[8] = {0, rows > 1 ? (row_step) : 0, rows > 2 ? 2 * (row_step) : 0,      \
                             rows > 3 ? 3 * (row_step) : 0, rows > 4 ? 4 * (row_step) : 0,     \
                             rows > 5 ? 5 * (row_step) : 0, rows > 6 ? 6 * (row_step) : 0,     \
                             rows > 7 ? 7 * (row_step) : 0};                                   \
        for (int l = l0; l < l1; l++) {                                                        \
            __global const float *x = a + (size_t)l * (k_step);                                \
            __global const float *y = b + (size_t)l * ldb;                                     \
            const float16 v = kiln_load16(y, cols);                                            \
            const float16 w = cols > 16 ? kiln_load16(y + 16, cols - 16) : (float16)(0.0f);    \
            GEMM_ROWS(GEMM_ADD_EDGE)                                                           \
        }                                                                                      \
    }
#define GEMM_ADD_EDGE(r)                                                                       \
    {                                                                                          \
        const float s = x[step[r]];                                                            \
        lo##r += s * v;                                                                        \
        hi##r += s * w;                                                                        \
    }

/* Every kernel of this file takes these arguments: a batch of `count`
 * products (kiln_gemm_batched), each operand `stride` floats after the one
 * before, in chunks of k (the GPU variant runs one chunk). With rows_first
 * the CPU variant's range is (row tiles, column tiles, ...): the tiles of
 * one column run one after another, each reading the same rows of B, and
 * A is what they read again for the next column (blas.c chooses). */
#define GEMM_ARGUMENTS                                                                         \
    int m, int n, int k, float alpha, __global const float *a, int a_offset, int lda,          \
        __global const float *b, int b_offset, int ldb, float beta, __global float *c,         \
        int c_offset, int ldc, int a_stride, int b_stride, int c_stride, int chunk_k,          \
        int chunks, int rows_first, __global float *partials

#define GEMM_CPU_KERNEL(k_step, row_step)                                                      \
    const int j0 = get_global_id(rows_first) * 32, i0 = get_global_id(1 - rows_first) * 8;     \
    const int product = get_global_id(2) / chunks, chunk = get_global_id(2) % chunks;          \
    if (j0 >= n || i0 >= m)                                                                    \
        return;                                                                                \
    const int cols = n - j0, rows = min(8, m - i0);                                            \
    const int l0 = chunk * chunk_k, l1 = min(k, l0 + chunk_k);                                 \
    a += a_offset + (size_t)product * a_stride + (size_t)i0 * (row_step);                      \
    b += b_offset + (size_t)product * b_stride + j0;                                           \
    GEMM_ROWS(GEMM_DECLARE)                                                                    \
    GEMM_CHUNK(k_step, row_step)                                                               \
    __global float *out = partials + ((size_t)product * chunks + chunk) * (size_t)m * n;       \
    int ld_out = n;                                                                            \
    float scale = 1.0f, keep = 0.0f;                                                           \
    if (chunks == 1) {                                                                         \
        out = c + c_offset + (size_t)product * c_stride;                                       \
        ld_out = ldc;                                                                          \
        scale = alpha;                                                                         \
        keep = beta;                                                                           \
    }                                                                                          \
    GEMM_ROWS(GEMM_STORE)

/* A is m x k. */
__kernel void kiln_gemm_nn_cpu(GEMM_ARGUMENTS)
{
#define GEMM_OFFSET(r) ((r) * lda)
    GEMM_CPU_KERNEL(1, lda)
#undef GEMM_OFFSET
}

/* A is stored k x m and used transposed: a tile's 8 rows of op(A) at a step
 * are 8 neighbouring values of one row of A (the weight gradient x^T dy
 * reads x as it lies, with no transposed copy). */
__kernel void kiln_gemm_tn_cpu(GEMM_ARGUMENTS)
{
#define GEMM_OFFSET(r) (r)
    GEMM_CPU_KERNEL(lda, 1)
#undef GEMM_OFFSET
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

/* A batch's product `index`: each operand `stride` floats after the one
 * before. */
#define GEMM_BATCH_OFFSETS(index)                                                              \
    a += (size_t)(index) * a_stride;                                                           \
    b += (size_t)(index) * b_stride;                                                           \
    c += (size_t)(index) * c_stride

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

__kernel void kiln_gemm_nn_gpu(GEMM_ARGUMENTS)
{
    GEMM_BATCH_OFFSETS(get_group_id(2));
    __local float as[GEMM_STEP * GEMM_A_ROW], bs[GEMM_STEP * GEMM_BLOCK];
    kiln_gemm_block(m, n, k, alpha, a + a_offset, lda, 0, b + b_offset, ldb, beta, c + c_offset,
                    ldc, as, bs);
}

__kernel void kiln_gemm_tn_gpu(GEMM_ARGUMENTS)
{
    GEMM_BATCH_OFFSETS(get_group_id(2));
    __local float as[GEMM_STEP * GEMM_A_ROW], bs[GEMM_STEP * GEMM_BLOCK];
    kiln_gemm_block(m, n, k, alpha, a + a_offset, lda, 1, b + b_offset, ldb, beta, c + c_offset,
                    ldc, as, bs);
}

