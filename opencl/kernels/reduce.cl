/* Reduce: mean, sum, largest or smallest of a sample's values over some of
 * its axes. A sample's offsets split in two: the kept axes give an output
 * value its first input value (kd/ks: their lengths and input strides, up
 * to 4, unused ones 1 and 0) and the reduced axes the others (rd/rs). */

#define KILN_REDUCE_MEAN 0
#define KILN_REDUCE_SUM 1
#define KILN_REDUCE_MAX 2
#define KILN_REDUCE_MIN 3

/* Offset of the j-th of the lengths' (d0, d1, d2, d3) row-major places. */
inline int kiln_reduce_place(int j, int d1, int d2, int d3, int s0, int s1, int s2, int s3)
{
    const int c3 = j % d3;
    j /= d3;
    const int c2 = j % d2;
    j /= d2;
    const int c1 = j % d1;
    return (j / d1) * s0 + c1 * s1 + c2 * s2 + c3 * s3;
}

/* The extreme's update: NaN wins, as PyTorch's amax and amin. */
inline float kiln_reduce_take(float acc, float v, int op)
{
    if (op == KILN_REDUCE_MAX)
        return (v > acc || isnan(v)) ? v : acc;
    if (op == KILN_REDUCE_MIN)
        return (v < acc || isnan(v)) ? v : acc;
    return acc + v;
}

inline float kiln_reduce_start(int op)
{
    return op == KILN_REDUCE_MAX ? -INFINITY : op == KILN_REDUCE_MIN ? INFINITY : 0.0f;
}

#define KILN_REDUCE_SHAPE_ARGS                                                                \
    int out_size, int in_size, int count, int op, int kd1, int kd2, int kd3, int ks0,         \
        int ks1, int ks2, int ks3, int rd1, int rd2, int rd3, int rs0, int rs1, int rs2,      \
        int rs3

/* The first input value of output r (of rows = batch x out_size). */
#define KILN_REDUCE_ROW_START(x, r)                                                           \
    ((x) + (size_t)((r) / out_size) * in_size +                                               \
     kiln_reduce_place((r) % out_size, kd1, kd2, kd3, ks0, ks1, ks2, ks3))

/* Values a sum adds up on their own before their total joins the rest:
 * a long sum's rounding grows with the block's length and the number of
 * blocks, not with the whole count. */
#define KILN_REDUCE_BLOCK 256

/* A work-item per output value, its values in order. */
__kernel void kiln_reduce_forward(__global const float *x, __global float *y, int rows,
                                  KILN_REDUCE_SHAPE_ARGS)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = KILN_REDUCE_ROW_START(x, r);
    float acc = kiln_reduce_start(op);
    for (int from = 0; from < count; from += KILN_REDUCE_BLOCK) {
        const int to = min(count, from + KILN_REDUCE_BLOCK);
        float block = kiln_reduce_start(op);
        for (int j = from; j < to; j++)
            block = kiln_reduce_take(block,
                                     xr[kiln_reduce_place(j, rd1, rd2, rd3, rs0, rs1, rs2, rs3)],
                                     op);
        acc = kiln_reduce_take(acc, block, op);
    }
    y[r] = op == KILN_REDUCE_MEAN ? acc / count : acc;
}

/* The GPU variant for long reductions: a work-group of KILN_ROW_LANES per
 * output value, each lane taking every KILN_ROW_LANES-th value, merged in
 * a fixed order (kiln_row_merge; the smallest as the largest of the
 * negated values). */
__kernel void kiln_reduce_forward_gpu(__global const float *x, __global float *y, int rows,
                                      KILN_REDUCE_SHAPE_ARGS)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    __global const float *xr = KILN_REDUCE_ROW_START(x, r);
    float acc = kiln_reduce_start(op);
    int nan = 0;
    for (int j = lane; j < count; j += KILN_ROW_LANES) {
        const float v = xr[kiln_reduce_place(j, rd1, rd2, rd3, rs0, rs1, rs2, rs3)];
        nan |= isnan(v);
        acc = kiln_reduce_take(acc, v, op);
    }
    const int extreme = op == KILN_REDUCE_MAX || op == KILN_REDUCE_MIN;
    float total = kiln_row_merge(merge, op == KILN_REDUCE_MIN ? -acc : acc, extreme);
    /* fmax passes over a NaN; a lane that met one says so. */
    if (extreme && kiln_row_merge(merge, nan ? 1.0f : 0.0f, 1) > 0.0f)
        total = NAN;
    if (lane == 0)
        y[r] = op == KILN_REDUCE_MEAN ? total / count
               : op == KILN_REDUCE_MIN ? -total : total;
}

/* For the largest and the smallest: per output value, the extreme (as
 * forward finds it) and how many values equal it, into ties[2r], ties[2r+1]. */
__kernel void kiln_reduce_ties(__global const float *x, __global float *ties, int rows,
                               KILN_REDUCE_SHAPE_ARGS)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = KILN_REDUCE_ROW_START(x, r);
    float acc = kiln_reduce_start(op);
    for (int j = 0; j < count; j++)
        acc = kiln_reduce_take(acc, xr[kiln_reduce_place(j, rd1, rd2, rd3, rs0, rs1, rs2, rs3)],
                               op);
    int equal = 0;
    for (int j = 0; j < count; j++)
        equal += xr[kiln_reduce_place(j, rd1, rd2, rd3, rs0, rs1, rs2, rs3)] == acc;
    ties[2 * (size_t)r] = acc;
    ties[2 * (size_t)r + 1] = (float)equal;
}

/* A work-item per input value (of n = batch x in_size): the gradient of
 * the output value it went into (whose place sums the input coordinates
 * times os, 0 on reduced axes), over the count for the mean; for the
 * largest and the smallest, to the values equal to the extreme, split
 * evenly among them (none where it is NaN). Adds when `accumulate`. */
__kernel void kiln_reduce_backward(__global const float *x, __global const float *dy,
                                   __global const float *ties, __global float *dx, int n,
                                   int out_size, int in_size, int count, int op, int id1,
                                   int id2, int id3, int os0, int os1, int os2, int os3,
                                   int accumulate)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int b = i / in_size;
    const int r = b * out_size + kiln_reduce_place(i % in_size, id1, id2, id3, os0, os1, os2,
                                                   os3);
    float g = dy[r];
    if (op == KILN_REDUCE_MEAN)
        g /= count;
    else if (op != KILN_REDUCE_SUM)
        g = x[i] == ties[2 * (size_t)r] ? g / ties[2 * (size_t)r + 1] : 0.0f;
    dx[i] = accumulate ? dx[i] + g : g;
}
