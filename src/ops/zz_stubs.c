/* TEMPORARY: weak placeholders so the tree links while operators are being written.
 * Real definitions (strong symbols) override these. Deleted once every operator exists. */
#include "backend/cpu/cpu.h"
#include "ops/op.h"

static hp_status stub_infer(const hp_graph *g, const hp_node *n, hp_dtype *dt, hp_shape *s) {
    (void)g, (void)dt, (void)s;
    return hp_error(HP_STATUS_UNSUPPORTED, "operator %s is not implemented yet", hp_op_name(n->op));
}

static hp_status stub_kernel(const hp_kernel_args *a) {
    return hp_error(HP_STATUS_UNSUPPORTED, "no CPU kernel for %s yet", hp_op_name(a->node->op));
}

__attribute__((weak)) const hp_op_def hp__op_def_lowercase_name = {.name = "lowercase_name", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_lowercase_name(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_add = {.name = "add", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_add(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sub = {.name = "sub", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_sub(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_mul = {.name = "mul", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_mul(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_scale = {.name = "scale", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_scale(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sum_to = {.name = "sum_to", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_sum_to(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sum = {.name = "sum", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_sum(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_mean = {.name = "mean", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_mean(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_reshape = {.name = "reshape", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_reshape(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_transpose = {.name = "transpose", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_transpose(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_slice = {.name = "slice", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_slice(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_pad = {.name = "pad", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_pad(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_concat = {.name = "concat", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_concat(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_matmul = {.name = "matmul", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_matmul(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_linear = {.name = "linear", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_linear(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_embedding = {.name = "embedding", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_embedding(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_embedding_backward = {.name = "embedding_backward", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_embedding_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_gelu = {.name = "gelu", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_gelu(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_gelu_backward = {.name = "gelu_backward", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_gelu_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_layernorm = {.name = "layernorm", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_layernorm(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_layernorm_backward = {.name = "layernorm_backward", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_layernorm_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_softmax = {.name = "softmax", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_softmax(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_softmax_backward = {.name = "softmax_backward", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_softmax_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_cross_entropy = {.name = "cross_entropy", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_cross_entropy(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_cross_entropy_backward = {.name = "cross_entropy_backward", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_cross_entropy_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_attention = {.name = "attention", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_attention(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_attention_backward = {.name = "attention_backward", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_attention_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sumsq = {.name = "sumsq", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_sumsq(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_clip_scale = {.name = "clip_scale", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_clip_scale(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_adamw = {.name = "adamw", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_adamw(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_fill = {.name = "fill", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_fill(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_copy = {.name = "copy", .max_in = 8, .n_out = 1, .infer = stub_infer};
__attribute__((weak)) hp_status hp__cpu_copy(const hp_kernel_args *a) { return stub_kernel(a); }
