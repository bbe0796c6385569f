/* Internal graph helpers for passes inside the library. */
#ifndef HP_IR_GRAPH_INTERNAL_H
#define HP_IR_GRAPH_INTERNAL_H

#include "hp/ir.h"

/* Names tensor t with `name` as given (no scope prefix); sticky error if the name is taken. */
void hp__graph_set_abs_name(hp_graph *g, hp_tid t, const char *name);

/*
 * Reorders the nodes: position i gets the node that was at order[i] (a permutation of
 * 0..n_nodes-1); producers are renumbered. Tensor ids do not change. The caller guarantees that
 * every input is still defined before use and that no node moves across an in-place writer of
 * what it reads; hp_graph_verify checks the first. HP_STATUS_OUT_OF_MEMORY on allocation failure.
 */
hp_status hp__graph_permute_nodes(hp_graph *g, const int *order);

#endif
