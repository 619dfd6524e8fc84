/* Winograd's F(2x2, 3x3) for 3x3 stride-1 'same' convolutions, channels
 * last (layers/conv2d_winograd.c): each 2 x 2 block of output pixels (a
 * tile) comes from a 4 x 4 input patch. With U = G g G^T per (input
 * channel, output channel) and V = B^T d B per (tile, input channel), the
 * 16 products M[xi] = V[xi] U[xi] are 16 GEMMs of (tiles x C) by (C x F),
 * and Y = A^T M A: 16 multiplies per tile and channel pair where the
 * window takes 36. The transforms' coefficients are 0, +-1 and 1/2, so
 * they add little round-off (test_layers holds it to the float64 reference). Layouts:
 * U[xi][cin][cout], V[xi][tile][cin], M[xi][tile][cout]. */

/* U from the (3, 3, C, F) kernel at w + w_offset: G g G^T for eight
 * (input channel, output channel) pairs at once, the eight in the lanes of
 * float8s; `g` holds the kernel's taps as the transform takes them. */
inline void winograd_filter8(float8 g[3][3], float8 v[16])
{
    float8 t[4][3];
    for (int x = 0; x < 3; x++) {
        t[0][x] = g[0][x];
        t[1][x] = 0.5f * (g[0][x] + g[1][x] + g[2][x]);
        t[2][x] = 0.5f * (g[0][x] - g[1][x] + g[2][x]);
        t[3][x] = g[2][x];
    }
    for (int i = 0; i < 4; i++) {
        v[i * 4] = t[i][0];
        v[i * 4 + 1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
        v[i * 4 + 2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
        v[i * 4 + 3] = t[i][2];
    }
}

/* U[xi][c][f] for the forward pass, eight output channels f a work-item
 * over a (F / 8, C) range: the kernel's rows, and U's, run along f, so
 * every load and store is a float8. (A work-item a pair, each of its 25
 * accesses on another page, took six times as long at 512 x 512.) */
__kernel void kiln_conv2d_winograd_filter(__global const float *w, int w_offset, int C, int F,
                                          __global float *u)
{
    const int f0 = get_global_id(0) * 8, c = get_global_id(1);
    if (f0 >= F || c >= C)
        return;
    const int nf = F - f0;
    float8 g[3][3], v[16];
    for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++)
            g[ky][kx] = kiln_load8(w + w_offset + (size_t)((ky * 3 + kx) * C + c) * F + f0, nf);
    winograd_filter8(g, v);
    for (int xi = 0; xi < 16; xi++)
        kiln_store8(u + ((size_t)xi * C + c) * F + f0, v[xi], nf);
}

/* U[xi][f][c] for the input gradient: the kernel turned 180 degrees with
 * its channels swapped, the convolution that takes dy back to dx. Eight
 * input channels c a work-item over an (F, C / 8) range: U's rows run
 * along c, so its stores are float8s, and the loads, F apart, are the
 * same cache lines as the neighbouring work-items' (f + 1). (A work-item a
 * pair, storing C apart, took four times as long at 512 x 512.) */
__kernel void kiln_conv2d_winograd_filter_flipped(__global const float *w, int w_offset, int C,
                                                  int F, __global float *u)
{
    const int f = get_global_id(0), c0 = get_global_id(1) * 8;
    if (f >= F || c0 >= C)
        return;
    const int nc = C - c0;
    float8 g[3][3], v[16];
    for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) {
            __global const float *p =
                w + w_offset + (size_t)(((2 - ky) * 3 + 2 - kx) * C + c0) * F + f;
            float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int q = 0; q < 8 && q < nc; q++)
                lanes[q] = p[(size_t)q * F];
            g[ky][kx] = vload8(0, lanes);
        }
    winograd_filter8(g, v);
    for (int xi = 0; xi < 16; xi++)
        kiln_store8(u + ((size_t)xi * F + f) * C + c0, v[xi], nc);
}

/* V from the (batch, H, W, C) input, eight channels a work-item over a
 * (C / 8, tiles) range: a pixel's channels are neighbours, so each load
 * and store is a float8. Patch pixels outside the image are the 'same'
 * padding's zeros. (A work-item a channel took four times as long.) */
__kernel void kiln_conv2d_winograd_input(__global const float *x, int H, int W, int C, int tiles,
                                         __global float *v)
{
    const int c = get_global_id(0) * 8, p = get_global_id(1);
    if (c >= C || p >= tiles)
        return;
    const int nc = C - c;
    const int tw = (W + 1) / 2, th = (H + 1) / 2;
    const int tx = p % tw, ty = (p / tw) % th, n = p / (tw * th);
    __global const float *sample = x + (size_t)n * H * W * C + c;
    float8 d[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int y = 2 * ty - 1 + i, xx = 2 * tx - 1 + j;
            d[i][j] = y >= 0 && y < H && xx >= 0 && xx < W
                          ? kiln_load8(sample + ((size_t)y * W + xx) * C, nc)
                          : (float8)(0.0f);
        }
    float8 t[4][4];
    for (int j = 0; j < 4; j++) {
        t[0][j] = d[0][j] - d[2][j];
        t[1][j] = d[1][j] + d[2][j];
        t[2][j] = d[2][j] - d[1][j];
        t[3][j] = d[1][j] - d[3][j];
    }
    for (int i = 0; i < 4; i++) {
        const float8 r[4] = {t[i][0] - t[i][2], t[i][1] + t[i][2], t[i][2] - t[i][1],
                             t[i][1] - t[i][3]};
        for (int j = 0; j < 4; j++)
            kiln_store8(v + ((size_t)(i * 4 + j) * tiles + p) * C + c, r[j], nc);
    }
}

/* Y = A^T M A into the (batch, H, W, F) output, eight channels a work-item
 * over a (F / 8, tiles) range; accumulate adds to what the output holds
 * (an input gradient that another layer's backward wrote first). */
__kernel void kiln_conv2d_winograd_output(__global const float *m, int H, int W, int F, int tiles,
                                          int accumulate, __global float *y)
{
    const int f = get_global_id(0) * 8, p = get_global_id(1);
    if (f >= F || p >= tiles)
        return;
    const int nf = F - f;
    const int tw = (W + 1) / 2, th = (H + 1) / 2;
    const int tx = p % tw, ty = (p / tw) % th, n = p / (tw * th);
    float8 a[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            a[i][j] = kiln_load8(m + ((size_t)(i * 4 + j) * tiles + p) * F + f, nf);
    float8 t[2][4];
    for (int j = 0; j < 4; j++) {
        t[0][j] = a[0][j] + a[1][j] + a[2][j];
        t[1][j] = a[1][j] - a[2][j] - a[3][j];
    }
    __global float *sample = y + (size_t)n * H * W * F + f;
    for (int i = 0; i < 2; i++) {
        const float8 r[2] = {t[i][0] + t[i][1] + t[i][2], t[i][1] - t[i][2] - t[i][3]};
        const int oy = 2 * ty + i;
        for (int j = 0; j < 2; j++) {
            const int ox = 2 * tx + j;
            if (oy < H && ox < W) {
                __global float *dst = sample + ((size_t)oy * W + ox) * F;
                kiln_store8(dst, accumulate ? kiln_load8(dst, nf) + r[j] : r[j], nf);
            }
        }
    }
}
