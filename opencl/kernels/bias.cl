/* A bias over the columns of a rows x cols matrix: added, with the
 * activation that follows it (forward), and summed over the rows (its
 * gradient). */

/* y[r, c] = act(y[r, c] + bias[c]) for a rows x cols matrix over a (cols,
 * rows) range; bias lives in the flat parameter buffer at bias_offset, act
 * is element-wise (KILN_ACT_LINEAR: none). */
__kernel void kiln_bias_add_gpu(__global float *y, int rows, int cols,
                                __global const float *params, int bias_offset, int act)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c >= cols || r >= rows)
        return;
    __global float *v = y + (size_t)r * cols + c;
    *v = kiln_activate(*v + params[bias_offset + c], act);
}

/* kiln_bias_add_gpu eight columns at a time, over a (column
 * blocks, rows) range: the CPU variant (one bias and activation call per
 * float, the GPU variant's, ran at 3 GB/s on PoCL). */
__kernel void kiln_bias_add_cpu(__global float *y, int rows, int cols,
                                __global const float *params, int bias_offset, int act)
{
    const int c = get_global_id(0) * 8, r = get_global_id(1);
    if (c >= cols || r >= rows)
        return;
    __global float *v = y + (size_t)r * cols + c;
    const int n = cols - c;
    kiln_store8(v, kiln_activate8(kiln_load8(v, n) + kiln_load8(params + bias_offset + c, n),
                                  act), n);
}

/* out[offset + c] (+)= sum over rows of x[r, c], a work-item per eight
 * columns walking down the rows: the CPU variant, reading whole cache
 * lines where a work-group per column reads one float of each (4 GB/s on
 * PoCL). Each sum runs in row order: deterministic. */
__kernel void kiln_bias_column_sum_cpu(__global const float *x, int rows, int cols,
                                       __global float *out, int offset, int accumulate)
{
    const int c = get_global_id(0) * 8;
    if (c >= cols)
        return;
    const int n = cols - c;
    __global const float *col = x + c;
    float8 s = (float8)(0.0f);
    if (n >= 8)
        for (int r = 0; r < rows; r++)
            s += vload8(0, col + (size_t)r * cols);
    else
        for (int r = 0; r < rows; r++)
            s += kiln_load8(col + (size_t)r * cols, n);
    if (accumulate)
        s += kiln_load8(out + offset + c, n);
    kiln_store8(out + offset + c, s, n);
}

/* The GPU variant: work-groups of exactly 16 x 16 items, 16 columns by 16
 * lanes of rows. Lane ly sums rows ly, ly + 16, ... of its column, so the
 * 16 items of a lane read 16 neighbouring floats of one row (a work-group
 * per column read one float of each row, `cols` floats apart); the lanes
 * then meet in local memory in a fixed order, so results are deterministic. */
__kernel void kiln_bias_column_sum_gpu(__global const float *x, int rows, int cols,
                                       __global float *out, int offset, int accumulate)
{
    __local float partial[16][17];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int c = get_group_id(0) * 16 + lx;
    float s = 0.0f;
    if (c < cols)
        for (int r = ly; r < rows; r += 16)
            s += x[(size_t)r * cols + c];
    partial[ly][lx] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = 8; step > 0; step /= 2) {
        if (ly < step)
            partial[ly][lx] += partial[ly + step][lx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (ly == 0 && c < cols)
        out[offset + c] = accumulate ? out[offset + c] + partial[0][lx] : partial[0][lx];
}
