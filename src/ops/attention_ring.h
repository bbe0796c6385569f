/*
 * Internal: ring attention's expansions (src/ops/attention_ring.c), which attention.c's operator
 * definitions name as their hp_op_def.expand.
 */
#ifndef HP_OPS_ATTENTION_RING_H
#define HP_OPS_ATTENTION_RING_H

#include "ops/op.h"

/* Ranks on a ring axis the expansion handles (its per-coordinate tables are this long). */
#define HP_RING_MAX 64

hp_status hp__attention_ring_expand(const hp_expand_ctx *c, const hp_node *n, const hp_tid *lin, const hp_attrs *local,
                                    hp_tid *lout, bool *done);
hp_status hp__attention_backward_ring_expand(const hp_expand_ctx *c, const hp_node *n, const hp_tid *lin,
                                             const hp_attrs *local, hp_tid *lout, bool *done);

#endif
