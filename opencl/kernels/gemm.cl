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
    if (rows == 8 && (cols >= 32 || b_panel)) {                                                \
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
 * A is what they read again for the next column (blas.c chooses). A
 * nonzero b_panel says B is packed (kiln_gemm_pack_b_cpu): panels of
 * b_panel rows of 32 floats, ldb 32; the GPU variant never sees one. */
#define GEMM_ARGUMENTS                                                                         \
    int m, int n, int k, float alpha, __global const float *a, int a_offset, int lda,          \
        __global const float *b, int b_offset, int ldb, float beta, __global float *c,         \
        int c_offset, int ldc, int a_stride, int b_stride, int c_stride, int chunk_k,          \
        int chunks, int rows_first, __global float *partials, int b_panel

#define GEMM_CPU_KERNEL(k_step, row_step)                                                      \
    const int j0 = get_global_id(rows_first) * 32, i0 = get_global_id(1 - rows_first) * 8;     \
    const int product = get_global_id(2) / chunks, chunk = get_global_id(2) % chunks;          \
    if (j0 >= n || i0 >= m)                                                                    \
        return;                                                                                \
    const int cols = n - j0, rows = min(8, m - i0);                                            \
    const int l0 = chunk * chunk_k, l1 = min(k, l0 + chunk_k);                                 \
    a += a_offset + (size_t)product * a_stride + (size_t)i0 * (row_step);                      \
    b += b_offset + (size_t)product * b_stride + (size_t)j0 * (b_panel ? b_panel : 1);         \
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

/* B (k x n, rows ldb apart) packed for the CPU variant's tiles: panel t
 * holds columns 32t to 32t + 31 of every row, 32 floats a row (zeros past
 * n), so that a tile's steps read consecutive addresses, where B's own
 * rows, 4 KiB apart in a 1024-column B, put each step on a page of its own
 * (blas.c chooses). Over (panels, rows of B). */
__kernel void kiln_gemm_pack_b_cpu(int k, int n, __global const float *b, int b_offset,
                                   int ldb, __global float *packed)
{
    const int t = get_global_id(0), l = get_global_id(1), cols = n - t * 32;
    if (cols <= 0 || l >= k)
        return;
    __global const float *src = b + b_offset + (size_t)l * ldb + t * 32;
    __global float *dst = packed + ((size_t)t * k + l) * 32;
    vstore16(kiln_load16(src, cols), 0, dst);
    vstore16(cols > 16 ? kiln_load16(src + 16, cols - 16) : (float16)(0.0f), 0, dst + 16);
}

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

/* C = alpha A B^T + beta C where A (m x k) is the smaller operand, as
 * its transpose C^T = B A^T (blas.c): the NN tile above, with `a` the
 * caller's B (n x k as stored, 8 of its rows a tile) and `b` the caller's A
 * transposed (a k x m copy), so that only A is ever copied; the range's
 * m and n are C^T's (the caller's n and m). The 8 x 32 tile of C^T is
 * transposed in registers, 8 x 16 at a time in three rounds of two-vector
 * interleaves (each a single permute; built lane by lane from eight
 * vectors, LLVM spent about as many instructions on it as on the
 * product), and stored as 32 rows of 8 neighbouring values of C. One
 * product in one chunk (blas.c). */
#define GEMM_ZIP1(x, y, h)                                                                     \
    (h ? (float16)(x.s8, y.s8, x.s9, y.s9, x.sa, y.sa, x.sb, y.sb, x.sc, y.sc, x.sd, y.sd,     \
                   x.se, y.se, x.sf, y.sf)                                                     \
       : (float16)(x.s0, y.s0, x.s1, y.s1, x.s2, y.s2, x.s3, y.s3, x.s4, y.s4, x.s5, y.s5,     \
                   x.s6, y.s6, x.s7, y.s7))
#define GEMM_ZIP2(x, y, h)                                                                     \
    (h ? (float16)(x.s89, y.s89, x.sab, y.sab, x.scd, y.scd, x.sef, y.sef)                     \
       : (float16)(x.s01, y.s01, x.s23, y.s23, x.s45, y.s45, x.s67, y.s67))
#define GEMM_ZIP4(x, y, h)                                                                     \
    (h ? (float16)(x.s89ab, y.s89ab, x.scdef, y.scdef)                                         \
       : (float16)(x.s0123, y.s0123, x.s4567, y.s4567))
/* Rows q and q + 1 of C from `pair` (C^T's columns q and q + 1, from the
 * tile's first column). */
#define GEMM_STORE_PAIR(q, pair)                                                               \
    {                                                                                          \
        const float16 o = alpha * (pair);                                                      \
        __global float *dst = c + (size_t)(j0 + (q)) * ldc + i0;                               \
        if ((q) < cols)                                                                        \
            kiln_store8(dst, o.lo + (beta != 0.0f ? beta * kiln_load8(dst, rows) : 0.0f),     \
                        rows);                                                                 \
        if ((q) + 1 < cols)                                                                    \
            kiln_store8(dst + ldc,                                                             \
                        o.hi + (beta != 0.0f ? beta * kiln_load8(dst + ldc, rows) : 0.0f),     \
                        rows);                                                                 \
    }
/* The eight accumulators r0 .. r7 (float16: C^T's columns first to
 * first + 15), transposed and stored. */
#define GEMM_STORE_TRANSPOSED(first, r0, r1, r2, r3, r4, r5, r6, r7)                           \
    for (int h1 = 0; h1 < 2; h1++) {                                                           \
        const float16 p01 = GEMM_ZIP1(r0, r1, h1), p23 = GEMM_ZIP1(r2, r3, h1);                \
        const float16 p45 = GEMM_ZIP1(r4, r5, h1), p67 = GEMM_ZIP1(r6, r7, h1);                \
        for (int h2 = 0; h2 < 2; h2++) {                                                       \
            const float16 q03 = GEMM_ZIP2(p01, p23, h2), q47 = GEMM_ZIP2(p45, p67, h2);        \
            const int q = (first) + h1 * 8 + h2 * 4;                                           \
            GEMM_STORE_PAIR(q, GEMM_ZIP4(q03, q47, 0))                                         \
            GEMM_STORE_PAIR(q + 2, GEMM_ZIP4(q03, q47, 1))                                     \
        }                                                                                      \
    }

__kernel void kiln_gemm_nt_cpu(GEMM_ARGUMENTS)
{
    const int j0 = get_global_id(rows_first) * 32, i0 = get_global_id(1 - rows_first) * 8;
    if (j0 >= n || i0 >= m)
        return;
    const int cols = n - j0, rows = min(8, m - i0);
    const int l0 = 0, l1 = k;
    a += a_offset + (size_t)i0 * lda;
    b += b_offset + j0;
    c += c_offset;
    GEMM_ROWS(GEMM_DECLARE)
#define GEMM_OFFSET(r) ((r) * lda)
    GEMM_CHUNK(1, lda)
#undef GEMM_OFFSET
    GEMM_STORE_TRANSPOSED(0, lo0, lo1, lo2, lo3, lo4, lo5, lo6, lo7)
    if (cols > 16)
        GEMM_STORE_TRANSPOSED(16, hi0, hi1, hi2, hi3, hi4, hi5, hi6, hi7)
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

