/* The CPU kernel table, generated from HP_OP_LIST: every operator must have a CPU kernel. */
#include "backend/cpu/cpu.h"

static const hp_cpu_kernel g_kernels[HP_OP_COUNT] = {
#define HP_CPU_KERNEL_ENTRY_(name, lower) [HP_OP_##name] = hp__cpu_##lower,
    HP_OP_LIST(HP_CPU_KERNEL_ENTRY_)
#undef HP_CPU_KERNEL_ENTRY_
};

hp_cpu_kernel hp__cpu_kernel(hp_op op) {
    HP_ASSERT(op >= 0 && op < HP_OP_COUNT);
    return g_kernels[op];
}

hp_status hp__cpu_nop(const hp_kernel_args *a) {
    (void)a;
    return HP_STATUS_OK;
}
