/* A bitonic sort of n int keys with their slots: the (key, slot) pairs
 * into ascending order of key, then slot. The pairs are distinct, so the
 * order is total and the result the same on every device; equal keys keep
 * their slots in slot order. keys holds `padded` pairs, a power of two
 * >= n and >= SORT_BLOCK; those past n are (INT_MAX, slot), after every
 * real pair. The embedding's GPU variant sorts its ids with it.
 *
 * SORT_ITEMS work-items a group (the host launches exactly that many), each
 * a compare-exchange of a block of SORT_BLOCK pairs in local memory per
 * step; strides of a block or more are global passes, a launch each. A
 * pair at index i sorts ascending within stage k when (i & k) == 0, so
 * neighbouring runs alternate and merge at the next stage. */

#define SORT_ITEMS 256
#define SORT_BLOCK (2 * SORT_ITEMS)

inline int sort_before(int2 a, int2 b)
{
    return a.x < b.x || (a.x == b.x && a.y < b.y);
}

/* The compare-exchange of item `t`'s pair at stride j within stage k, of
 * the pairs at `base` + index of `keys` (local or global memory). */
#define SORT_EXCHANGE(keys, base, t, k, j)                                                    \
    do {                                                                                      \
        const int lo = 2 * (j) * ((t) / (j)) + (t) % (j), hi = lo + (j);                      \
        const int2 a = keys[lo], b = keys[hi];                                                \
        const int up = (((base) + lo) & (k)) == 0;                                            \
        if (up ? sort_before(b, a) : sort_before(a, b)) {                                     \
            keys[lo] = b;                                                                     \
            keys[hi] = a;                                                                     \
        }                                                                                     \
    } while (0)

/* Stage k's steps of strides below SORT_BLOCK on one block in local memory. */
inline void sort_merge_block(__local int2 *tile, int base, int k)
{
    const int t = get_local_id(0);
    for (int j = min(k, SORT_BLOCK) / 2; j > 0; j /= 2) {
        SORT_EXCHANGE(tile, base, t, k, j);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Each block's pairs from src, sorted through stages 2..SORT_BLOCK; range
 * padded / 2 in groups of SORT_ITEMS. */
__kernel void kiln_sort_blocks(__global const int *src, int n, int padded,
                               __global int2 *keys)
{
    __local int2 tile[SORT_BLOCK];
    const int base = get_group_id(0) * SORT_BLOCK, t = get_local_id(0);
    if (base >= padded)   /* the whole group: its barriers stay uniform */
        return;
    for (int i = t; i < SORT_BLOCK; i += SORT_ITEMS) {
        const int slot = base + i;
        tile[i] = (int2)(slot < n ? src[slot] : INT_MAX, slot);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 2; k <= SORT_BLOCK; k *= 2)
        sort_merge_block(tile, base, k);
    for (int i = t; i < SORT_BLOCK; i += SORT_ITEMS)
        keys[base + i] = tile[i];
}

/* One step of stage k at stride j >= SORT_BLOCK; range padded / 2. */
__kernel void kiln_sort_step(__global int2 *keys, int padded, int k, int j)
{
    const int t = get_global_id(0);
    if (t >= padded / 2)
        return;
    SORT_EXCHANGE(keys, 0, t, k, j);
}

/* The rest of stage k (strides below SORT_BLOCK) block by block; range
 * padded / 2 in groups of SORT_ITEMS. */
__kernel void kiln_sort_merge(__global int2 *keys, int padded, int k)
{
    __local int2 tile[SORT_BLOCK];
    const int base = get_group_id(0) * SORT_BLOCK, t = get_local_id(0);
    if (base >= padded)
        return;
    for (int i = t; i < SORT_BLOCK; i += SORT_ITEMS)
        tile[i] = keys[base + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    sort_merge_block(tile, base, k);
    for (int i = t; i < SORT_BLOCK; i += SORT_ITEMS)
        keys[base + i] = tile[i];
}
