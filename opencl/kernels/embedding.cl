/* Embedding lookup and its deterministic scatter-add gradient.
 *
 * ids holds n int32 slots (batch x positions); the table is input_dim x
 * width floats at `offset` in the flat parameter buffer. The host checked
 * every id against input_dim; an id outside it reads and writes nothing
 * here, so that a bug elsewhere cannot reach past the table. */

/* out[i, c] = table[ids[i], c]; range (width, n). */
__kernel void kiln_embedding_forward(__global const int *ids, int n, int input_dim, int width,
                                     __global const float *params, int offset,
                                     __global float *out)
{
    const int c = get_global_id(0), i = get_global_id(1);
    if (c >= width || i >= n)
        return;
    const int id = ids[i];
    out[(size_t)i * width + c] =
        id >= 0 && id < input_dim ? params[offset + (size_t)id * width + c] : 0.0f;
}

/* links[i]: the next slot after i holding ids[i] (-1: none); links[n + i]:
 * 1 when no slot before i holds it. Each work-item stops at the nearest
 * equal id either way, so frequent ids cost little. */
__kernel void kiln_embedding_links_cpu(__global const int *ids, int n, __global int *links)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int id = ids[i];
    int next = -1, first = 1;
    for (int j = i + 1; j < n; j++)
        if (ids[j] == id) {
            next = j;
            break;
        }
    for (int j = i - 1; j >= 0; j--)
        if (ids[j] == id) {
            first = 0;
            break;
        }
    links[i] = next;
    links[n + i] = first;
}

/* The GPU variant of the links, without a scan per slot (which costs a
 * frequent id's slots O(n) each and diverges): sort.cl sorts the (id, slot)
 * pairs, then each pair links to its neighbours in sorted order. The pairs
 * are distinct, so the order is total and the result the same on every
 * device; within an id the slots are in slot order, so the links equal
 * kiln_embedding_links_cpu' and the gradient is the same bit for bit. */
/* links and first flags, as kiln_embedding_links_cpu writes them, from the
 * sorted pairs: position p's next equal id is at p + 1 if anywhere. */
__kernel void kiln_embedding_links_gpu(__global const int2 *keys, int n, __global int *links)
{
    const int p = get_global_id(0);
    if (p >= n)
        return;
    const int2 key = keys[p];
    if (key.y < 0 || key.y >= n)   /* only if the sort went wrong: stay in bounds */
        return;
    links[key.y] = p + 1 < n && keys[p + 1].x == key.x ? keys[p + 1].y : -1;
    links[n + key.y] = p == 0 || keys[p - 1].x != key.x;
}

/* grads[ids[i], c] = the sum of d_out[j, c] over the slots j holding that
 * id, in slot order, by the id's first slot i; range (width, n). Rows of
 * ids absent from the batch were zeroed before. */
__kernel void kiln_embedding_grad(__global const int *ids, __global const float *d_out, int n,
                                  int input_dim, int width, __global const int *links,
                                  __global float *grads, int offset)
{
    const int c = get_global_id(0), i = get_global_id(1);
    if (c >= width || i >= n || !links[n + i])
        return;
    const int id = ids[i];
    if (id < 0 || id >= input_dim)
        return;
    float sum = 0.0f;
    for (int j = i; j >= 0 && j < n; j = links[j])   /* in bounds whatever links holds */
        sum += d_out[(size_t)j * width + c];
    grads[offset + (size_t)id * width + c] = sum;
}
