/* The transpose of a row-major matrix. */

/* Two float8s interleaved a lane, two or four lanes at a time (h: the high
 * halves), each a single two-vector permute. */
#define TRANSPOSE_ZIP1(x, y, h)                                                                \
    (h ? (float8)(x.s4, y.s4, x.s5, y.s5, x.s6, y.s6, x.s7, y.s7)                              \
       : (float8)(x.s0, y.s0, x.s1, y.s1, x.s2, y.s2, x.s3, y.s3))
#define TRANSPOSE_ZIP2(x, y, h)                                                                \
    (h ? (float8)(x.s45, y.s45, x.s67, y.s67) : (float8)(x.s01, y.s01, x.s23, y.s23))
#define TRANSPOSE_ZIP4(x, y, h) (h ? (float8)(x.s4567, y.s4567) : (float8)(x.s0123, y.s0123))

/* dst (cols x rows) = src (rows x cols, at src_offset) transposed, a block
 * of 8 x 8 per work-item over a (column blocks, row blocks) range: eight
 * 32-byte reads along src's rows, eight 32-byte writes along dst's. A
 * whole block is transposed in registers in three rounds of interleaves
 * (24 permutes; gathered a value at a time, a 5408 x 64 matrix took 0.32
 * ms); a block at an edge a value at a time. (A work-item per float read
 * one of the two 4 or more KiB apart from its neighbour's: 35 ms a step
 * for the seed ResNet's 11M weights.) */
__kernel void kiln_transpose_matrix_cpu(__global const float *src, int src_offset, int rows,
                                        int cols, __global float *dst)
{
    const int c0 = get_global_id(0) * 8, r0 = get_global_id(1) * 8;
    if (c0 >= cols || r0 >= rows)
        return;
    const int n_rows = min(8, rows - r0), n_cols = min(8, cols - c0);
    __global const float *in = src + src_offset + (size_t)r0 * cols + c0;
    __global float *out = dst + (size_t)c0 * rows + r0;
    if (n_rows == 8 && n_cols == 8) {
        const float8 x0 = vload8(0, in), x1 = vload8(0, in + cols);
        const float8 x2 = vload8(0, in + 2 * (size_t)cols), x3 = vload8(0, in + 3 * (size_t)cols);
        const float8 x4 = vload8(0, in + 4 * (size_t)cols), x5 = vload8(0, in + 5 * (size_t)cols);
        const float8 x6 = vload8(0, in + 6 * (size_t)cols), x7 = vload8(0, in + 7 * (size_t)cols);
        for (int h1 = 0; h1 < 2; h1++) {
            const float8 p01 = TRANSPOSE_ZIP1(x0, x1, h1), p23 = TRANSPOSE_ZIP1(x2, x3, h1);
            const float8 p45 = TRANSPOSE_ZIP1(x4, x5, h1), p67 = TRANSPOSE_ZIP1(x6, x7, h1);
            for (int h2 = 0; h2 < 2; h2++) {
                const float8 q03 = TRANSPOSE_ZIP2(p01, p23, h2);
                const float8 q47 = TRANSPOSE_ZIP2(p45, p67, h2);
                const int j = h1 * 4 + h2 * 2;   /* the column of src this pair is */
                vstore8(TRANSPOSE_ZIP4(q03, q47, 0), 0, out + (size_t)j * rows);
                vstore8(TRANSPOSE_ZIP4(q03, q47, 1), 0, out + (size_t)(j + 1) * rows);
            }
        }
        return;
    }
    float b[8][8];
    for (int i = 0; i < 8; i++) {
        const float8 v = i < n_rows ? kiln_load8(in + (size_t)i * cols, n_cols) : (float8)(0.0f);
        vstore8(v, 0, b[i]);
    }
    for (int j = 0; j < n_cols; j++) {
        const float8 v = (float8)(b[0][j], b[1][j], b[2][j], b[3][j], b[4][j], b[5][j], b[6][j],
                                  b[7][j]);
        kiln_store8(out + (size_t)j * rows, v, n_rows);
    }
}

/* The GPU variant: work-groups of exactly 16 x 16 items stage a 16 x 16
 * block in local memory, so that both the reads (along src's rows) and the
 * writes (along dst's) are neighbouring floats for neighbouring items. A
 * row of 17 keeps the column reads off a single local-memory bank. */
__kernel void kiln_transpose_matrix_gpu(__global const float *src, int src_offset,
                                        int rows, int cols, __global float *dst)
{
    __local float block[16][17];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int c0 = get_group_id(0) * 16, r0 = get_group_id(1) * 16;
    if (r0 + ly < rows && c0 + lx < cols)
        block[ly][lx] = src[src_offset + (size_t)(r0 + ly) * cols + c0 + lx];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c0 + ly < cols && r0 + lx < rows)
        dst[(size_t)(c0 + ly) * rows + r0 + lx] = block[lx][ly];
}
