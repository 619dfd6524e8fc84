/* Binary: out = a op b element-wise, the operands broadcast NumPy's way over
 * a sample's axes. The layer hands the output's axes collapsed to at most
 * four, (d0, d1, d2, d3) with leading 1s, and each operand's stride along
 * each (0 where it is broadcast), so that (H, W, C) * (1, 1, C) arrives as
 * (1, 1, HW, C) and reads its scale without a division per axis it lacks.
 * An operand's sample starts at off + n * batch_stride (batch_stride 0: a
 * parameter, one for the batch). Ops: kiln_binary_op's values. */
#define KILN_BIN_ADD 0
#define KILN_BIN_SUB 1
#define KILN_BIN_MUL 2
#define KILN_BIN_DIV 3
#define KILN_BIN_MAX 4
#define KILN_BIN_MIN 5

inline float kiln_binary_apply(int op, float x, float y)
{
    switch (op) {
    case KILN_BIN_ADD: return x + y;
    case KILN_BIN_SUB: return x - y;
    case KILN_BIN_MUL: return x * y;
    case KILN_BIN_DIV: return x / y;
    case KILN_BIN_MAX: return fmax(x, y);
    default: return fmin(x, y);
    }
}

/* d(x op y)/dx (side 0) or /dy (side 1). Max and Min split a tie in
 * halves, as PyTorch 1.13's torch.maximum and torch.minimum do. */
inline float kiln_binary_partial(int op, int side, float x, float y)
{
    switch (op) {
    case KILN_BIN_ADD: return 1.0f;
    case KILN_BIN_SUB: return side ? -1.0f : 1.0f;
    case KILN_BIN_MUL: return side ? x : y;
    case KILN_BIN_DIV: return side ? -x / (y * y) : 1.0f / y;
    case KILN_BIN_MAX:
        return x == y ? 0.5f : (side ? (y > x ? 1.0f : 0.0f) : (x > y ? 1.0f : 0.0f));
    default:
        return x == y ? 0.5f : (side ? (y < x ? 1.0f : 0.0f) : (x < y ? 1.0f : 0.0f));
    }
}

/* The CPU variant: a work-item per row of the last axis (d3 values), its
 * op chosen once and the row's loop free of divisions, which PoCL
 * vectorises (one value a work-item ran the SE scale of 16 x (56, 56, 64)
 * 10x slower than a same-shape Add). Range (a sample's rows, batch). */
__kernel void kiln_binary_forward_cpu(__global const float *a, int a_off, int a_batch,
                                      __global const float *b, int b_off, int b_batch,
                                      __global float *out, int op, int d1, int d2, int d3,
                                      int size, int batch, int sa0, int sa1, int sa2, int sa3,
                                      int sb0, int sb1, int sb2, int sb3)
{
    const int r = get_global_id(0), n = get_global_id(1);
    if (r >= size / d3 || n >= batch)   /* a GPU's range may be rounded up */
        return;
    const int i2 = r % d2, r2 = r / d2, i1 = r2 % d1, i0 = r2 / d1;
    __global const float *x = a + (size_t)a_off + (size_t)n * a_batch + (size_t)i0 * sa0 +
                              (size_t)i1 * sa1 + (size_t)i2 * sa2;
    __global const float *y = b + (size_t)b_off + (size_t)n * b_batch + (size_t)i0 * sb0 +
                              (size_t)i1 * sb1 + (size_t)i2 * sb2;
    __global float *o = out + (size_t)n * size + (size_t)r * d3;
    switch (op) {
    case KILN_BIN_ADD:
        for (int k = 0; k < d3; k++)
            o[k] = x[k * sa3] + y[k * sb3];
        break;
    case KILN_BIN_SUB:
        for (int k = 0; k < d3; k++)
            o[k] = x[k * sa3] - y[k * sb3];
        break;
    case KILN_BIN_MUL:
        for (int k = 0; k < d3; k++)
            o[k] = x[k * sa3] * y[k * sb3];
        break;
    case KILN_BIN_DIV:
        for (int k = 0; k < d3; k++)
            o[k] = x[k * sa3] / y[k * sb3];
        break;
    case KILN_BIN_MAX:
        for (int k = 0; k < d3; k++)
            o[k] = fmax(x[k * sa3], y[k * sb3]);
        break;
    default:
        for (int k = 0; k < d3; k++)
            o[k] = fmin(x[k * sa3], y[k * sb3]);
        break;
    }
}

/* The GPU variant: a work-item per value, neighbours reading neighbours.
 * Range (a sample's outputs, batch). */
__kernel void kiln_binary_forward_gpu(__global const float *a, int a_off, int a_batch,
                                      __global const float *b, int b_off, int b_batch,
                                      __global float *out, int op, int d1, int d2, int d3,
                                      int size, int batch, int sa0, int sa1, int sa2, int sa3,
                                      int sb0, int sb1, int sb2, int sb3)
{
    const int i = get_global_id(0), n = get_global_id(1);
    if (i >= size || n >= batch)
        return;
    const int i3 = i % d3, r3 = i / d3, i2 = r3 % d2, r2 = r3 / d2, i1 = r2 % d1, i0 = r2 / d1;
    const size_t at = (size_t)a_off + (size_t)n * a_batch + (size_t)i0 * sa0 +
                      (size_t)i1 * sa1 + (size_t)i2 * sa2 + (size_t)i3 * sa3;
    const size_t bt = (size_t)b_off + (size_t)n * b_batch + (size_t)i0 * sb0 +
                      (size_t)i1 * sb1 + (size_t)i2 * sb2 + (size_t)i3 * sb3;
    out[(size_t)n * size + i] = kiln_binary_apply(op, a[at], b[bt]);
}

/* The gradient of one operand (side 0: a, 1: b): each of its values sums
 * dy * the partial over the outputs it reaches, in output order, and over
 * `batches` samples from sample n in batch order (a parameter: all of
 * them, one work-item each value; a computed operand: its own sample).
 * Range (the operand's values, 1 or the batch). `own*` are the side's
 * strides, `oth*` the other's; written at g_off + n * own_size, or added
 * (accumulate). */
__kernel void kiln_binary_backward(__global const float *dy, __global const float *a,
                                   int a_off, int a_batch, __global const float *b, int b_off,
                                   int b_batch, __global float *g, int g_off, int accumulate,
                                   int op, int side, int batches, int samples, int own_size,
                                   int d0, int d1,
                                   int d2, int d3, int sa0, int sa1, int sa2, int sa3, int sb0,
                                   int sb1, int sb2, int sb3)
{
    const int j = get_global_id(0), n0 = get_global_id(1);
    if (j >= own_size || n0 >= samples)   /* samples: 1 for a parameter, else the batch */
        return;
    const int d[4] = {d0, d1, d2, d3};
    const int sa[4] = {sa0, sa1, sa2, sa3}, sb[4] = {sb0, sb1, sb2, sb3};
    /* j's place along the axes the side has; the others are looped over. */
    int c[4], span[4];
    int rest = j;
    for (int k = 3; k >= 0; k--) {
        const int has = (side ? sb[k] : sa[k]) != 0;
        c[k] = has ? rest % d[k] : 0;
        rest = has ? rest / d[k] : rest;
        span[k] = has ? 1 : d[k];
    }
    const int size = d0 * d1 * d2 * d3;
    float sum = 0.0f;
    for (int n = n0; n < n0 + batches; n++)
        for (int e0 = 0; e0 < span[0]; e0++)
            for (int e1 = 0; e1 < span[1]; e1++)
                for (int e2 = 0; e2 < span[2]; e2++)
                    for (int e3 = 0; e3 < span[3]; e3++) {
                        const int i0 = c[0] + e0, i1 = c[1] + e1, i2 = c[2] + e2,
                                  i3 = c[3] + e3;
                        const int i = ((i0 * d1 + i1) * d2 + i2) * d3 + i3;
                        const float x = a[(size_t)a_off + (size_t)n * a_batch +
                                          (size_t)i0 * sa0 + (size_t)i1 * sa1 +
                                          (size_t)i2 * sa2 + (size_t)i3 * sa3];
                        const float y = b[(size_t)b_off + (size_t)n * b_batch +
                                          (size_t)i0 * sb0 + (size_t)i1 * sb1 +
                                          (size_t)i2 * sb2 + (size_t)i3 * sb3];
                        sum += dy[(size_t)n * size + i] * kiln_binary_partial(op, side, x, y);
                    }
    __global float *at = g + (size_t)g_off + (size_t)n0 * own_size + j;
    *at = accumulate ? *at + sum : sum;
}

/* The gradient of an operand the output has the shape of (broadcast along
 * no axis): g = dy * the partial, value by value, written or added. The
 * CPU variant a row of the last axis a work-item, range (a sample's rows,
 * batch); the GPU variant a value, range (a sample's values, batch). */
inline void kiln_binary_grad_at(__global const float *dy, __global const float *a,
                                size_t at, __global const float *b, size_t bt,
                                __global float *g, size_t o, int accumulate, int op, int side)
{
    const float v = dy[o] * kiln_binary_partial(op, side, a[at], b[bt]);
    g[o] = accumulate ? g[o] + v : v;
}

__kernel void kiln_binary_backward_full_cpu(__global const float *dy, __global const float *a,
                                            int a_off, int a_batch, __global const float *b,
                                            int b_off, int b_batch, __global float *g,
                                            int accumulate, int op, int side, int d1, int d2,
                                            int d3, int size, int batch, int sa0, int sa1,
                                            int sa2,
                                            int sa3, int sb0, int sb1, int sb2, int sb3)
{
    const int r = get_global_id(0), n = get_global_id(1);
    if (r >= size / d3 || n >= batch)   /* a GPU's range may be rounded up */
        return;
    const int i2 = r % d2, r2 = r / d2, i1 = r2 % d1, i0 = r2 / d1;
    const size_t at = (size_t)a_off + (size_t)n * a_batch + (size_t)i0 * sa0 +
                      (size_t)i1 * sa1 + (size_t)i2 * sa2;
    const size_t bt = (size_t)b_off + (size_t)n * b_batch + (size_t)i0 * sb0 +
                      (size_t)i1 * sb1 + (size_t)i2 * sb2;
    const size_t o = (size_t)n * size + (size_t)r * d3;
    for (int k = 0; k < d3; k++)
        kiln_binary_grad_at(dy, a, at + (size_t)k * sa3, b, bt + (size_t)k * sb3, g, o + k,
                            accumulate, op, side);
}

__kernel void kiln_binary_backward_full_gpu(__global const float *dy, __global const float *a,
                                            int a_off, int a_batch, __global const float *b,
                                            int b_off, int b_batch, __global float *g,
                                            int accumulate, int op, int side, int d1, int d2,
                                            int d3, int size, int batch, int sa0, int sa1,
                                            int sa2,
                                            int sa3, int sb0, int sb1, int sb2, int sb3)
{
    const int i = get_global_id(0), n = get_global_id(1);
    if (i >= size || n >= batch)
        return;
    const int i3 = i % d3, r3 = i / d3, i2 = r3 % d2, r2 = r3 / d2, i1 = r2 % d1, i0 = r2 / d1;
    const size_t at = (size_t)a_off + (size_t)n * a_batch + (size_t)i0 * sa0 +
                      (size_t)i1 * sa1 + (size_t)i2 * sa2 + (size_t)i3 * sa3;
    const size_t bt = (size_t)b_off + (size_t)n * b_batch + (size_t)i0 * sb0 +
                      (size_t)i1 * sb1 + (size_t)i2 * sb2 + (size_t)i3 * sb3;
    kiln_binary_grad_at(dy, a, at, b, bt, g, (size_t)n * size + i, accumulate, op, side);
}
