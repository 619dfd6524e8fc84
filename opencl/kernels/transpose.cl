/* The transpose of a row-major matrix. */

/* dst (cols x rows) = src (rows x cols, at src_offset) transposed, a block
 * of 8 x 8 per work-item over a (column blocks, row blocks) range: eight
 * 32-byte reads along src's rows, eight 32-byte writes along dst's. (A
 * work-item per float read one of the two 4 or more KiB apart from its
 * neighbour's: 35 ms a step for the seed ResNet's 11M weights.) */
__kernel void kiln_transpose_matrix_cpu(__global const float *src, int src_offset, int rows,
                                        int cols, __global float *dst)
{
    const int c0 = get_global_id(0) * 8, r0 = get_global_id(1) * 8;
    if (c0 >= cols || r0 >= rows)
        return;
    const int n_rows = min(8, rows - r0), n_cols = min(8, cols - c0);
    float b[8][8];
    for (int i = 0; i < 8; i++) {
        const float8 v = i < n_rows ? kiln_load8(src + src_offset + (size_t)(r0 + i) * cols + c0,
                                                 n_cols)
                                    : (float8)(0.0f);
        vstore8(v, 0, b[i]);
    }
    for (int j = 0; j < n_cols; j++) {
        const float8 v = (float8)(b[0][j], b[1][j], b[2][j], b[3][j], b[4][j], b[5][j], b[6][j],
                                  b[7][j]);
        kiln_store8(dst + (size_t)(c0 + j) * rows + r0, v, n_rows);
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
