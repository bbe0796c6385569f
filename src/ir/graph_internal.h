/* Internal graph helpers for passes inside the library. */
#ifndef HP_IR_GRAPH_INTERNAL_H
#define HP_IR_GRAPH_INTERNAL_H

#include "hp/ir.h"

/* Names tensor t with `name` as given (no scope prefix); sticky error if the name is taken. */
void hp__graph_set_abs_name(hp_graph *g, hp_tid t, const char *name);

#endif
