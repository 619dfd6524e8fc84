/* Every layer kind: one line each, KILN_LAYER_KIND(x) for the ops table
 * kiln_layer_x that layers/x.c defines (or, for a kind that shares a file,
 * the file named in its line's comment). layers/layer.h and
 * layers/registry.c include this list; layers/meson.build builds each
 * layers/x.c and opencl/meson.build embeds each opencl/kernels/x.cl it
 * finds. A new kind adds its line here and nothing else outside its own
 * files and its public builder. No include guard: it is included once per
 * expansion. */
KILN_LAYER_KIND(input)
KILN_LAYER_KIND(dense)
KILN_LAYER_KIND(conv2d)
KILN_LAYER_KIND(conv2d_transpose)
KILN_LAYER_KIND(max_pooling2d)
KILN_LAYER_KIND(average_pooling2d)
KILN_LAYER_KIND(global_average_pooling2d)   /* average_pooling2d.c */
KILN_LAYER_KIND(global_max_pooling2d)       /* max_pooling2d.c */
KILN_LAYER_KIND(batch_norm)
KILN_LAYER_KIND(dropout)
KILN_LAYER_KIND(flatten)
KILN_LAYER_KIND(activation)
KILN_LAYER_KIND(add)
KILN_LAYER_KIND(dot)
KILN_LAYER_KIND(layer_norm)
KILN_LAYER_KIND(reshape)
KILN_LAYER_KIND(concatenate)
KILN_LAYER_KIND(multi_head_attention)
KILN_LAYER_KIND(embedding)
KILN_LAYER_KIND(position_embedding)
KILN_LAYER_KIND(permute)
KILN_LAYER_KIND(zero_padding2d)
KILN_LAYER_KIND(reduce)
KILN_LAYER_KIND(softmax)
KILN_LAYER_KIND(binary)
KILN_LAYER_KIND(math)
KILN_LAYER_KIND(matmul)
KILN_LAYER_KIND(slice)
KILN_LAYER_KIND(expand)
KILN_LAYER_KIND(learned_tokens)
