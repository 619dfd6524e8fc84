/* PositionEmbedding: a (max_length, width) table at `offset` in the flat
 * parameter buffer, its first T rows added to each sample's T x width
 * values (`row` of them). */

/* out[b, k] = in[b, k] + table[k]; range (row, batch). */
__kernel void kiln_position_embedding_forward(__global const float *in, int row, int batch,
                                              __global const float *params, int offset,
                                              __global float *out)
{
    const int k = get_global_id(0), b = get_global_id(1);
    if (k >= row || b >= batch)
        return;
    const size_t at = (size_t)b * row + k;
    out[at] = in[at] + params[offset + k];
}

/* grads[k] = the sum over the batch of d_out[b, k], in batch order (the
 * same sum on every device), and 0 for the rows past T; range (table). */
__kernel void kiln_position_embedding_grad(__global const float *d_out, int row, int table,
                                           int batch, __global float *grads, int offset)
{
    const int k = get_global_id(0);
    if (k >= table)
        return;
    float sum = 0.0f;
    for (int b = 0; k < row && b < batch; b++)
        sum += d_out[(size_t)b * row + k];
    grads[offset + k] = sum;
}
