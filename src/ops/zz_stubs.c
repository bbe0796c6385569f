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

__attribute__((weak)) const hp_op_def hp__op_def_lowercase_name = {"lowercase_name", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_lowercase_name(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_add = {"add", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_add(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sub = {"sub", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_sub(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_mul = {"mul", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_mul(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_scale = {"scale", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_scale(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sum_to = {"sum_to", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_sum_to(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sum = {"sum", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_sum(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_mean = {"mean", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_mean(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_reshape = {"reshape", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_reshape(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_transpose = {"transpose", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_transpose(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_slice = {"slice", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_slice(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_pad = {"pad", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_pad(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_concat = {"concat", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_concat(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_matmul = {"matmul", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_matmul(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_linear = {"linear", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_linear(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_embedding = {"embedding", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_embedding(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_embedding_backward = {"embedding_backward", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_embedding_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_gelu = {"gelu", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_gelu(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_gelu_backward = {"gelu_backward", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_gelu_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_layernorm = {"layernorm", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_layernorm(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_layernorm_backward = {"layernorm_backward", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_layernorm_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_softmax = {"softmax", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_softmax(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_softmax_backward = {"softmax_backward", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_softmax_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_cross_entropy = {"cross_entropy", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_cross_entropy(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_cross_entropy_backward = {"cross_entropy_backward", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_cross_entropy_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_attention = {"attention", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_attention(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_attention_backward = {"attention_backward", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_attention_backward(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_sumsq = {"sumsq", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_sumsq(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_clip_scale = {"clip_scale", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_clip_scale(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_adamw = {"adamw", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_adamw(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_fill = {"fill", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_fill(const hp_kernel_args *a) { return stub_kernel(a); }
__attribute__((weak)) const hp_op_def hp__op_def_copy = {"copy", 0, 8, 1, stub_infer, NULL, NULL, NULL};
__attribute__((weak)) hp_status hp__cpu_copy(const hp_kernel_args *a) { return stub_kernel(a); }
