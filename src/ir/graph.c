/* Graphs: tensor and node tables, names and scopes, sticky builder errors, verifier, dump. */
#include "ir/op.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SCOPES 16

struct hp_graph {
    hp_arena *arena;
    hp_tensor *tensors;
    int n_tensors, cap_tensors;
    hp_node *nodes;
    int n_nodes, cap_nodes;
    /* open-addressing hash of full names -> tensor id */
    hp_tid *names;
    int cap_names, n_names;
    const char *scopes[MAX_SCOPES];
    int n_scopes;
    const char *scope_str; /* joined scopes, arena-owned */
    uint32_t node_flags;
    hp_status status;
    char error[1024];
};

hp_graph *hp_graph_new(void) {
    hp_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->arena = hp_arena_new(0);
    if (!g->arena) {
        free(g);
        return NULL;
    }
    g->scope_str = "";
    return g;
}

void hp_graph_free(hp_graph *g) {
    if (!g) return;
    hp_arena_free(g->arena);
    free(g->tensors);
    free(g->nodes);
    free(g->names);
    free(g);
}

hp_status hp_graph_status(const hp_graph *g) { return g->status; }
const char *hp_graph_error(const hp_graph *g) { return g->error; }
hp_arena *hp_graph_arena(hp_graph *g) { return g->arena; }
int hp_graph_n_tensors(const hp_graph *g) { return g->n_tensors; }
int hp_graph_n_nodes(const hp_graph *g) { return g->n_nodes; }

hp_status hp_graph_fail(hp_graph *g, hp_status code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g->status == HP_STATUS_OK) {
        g->status = code;
        memcpy(g->error, msg, sizeof msg);
    }
    return hp_error(g->status, "%s", g->error);
}

hp_tensor *hp_graph_tensor(const hp_graph *g, hp_tid t) {
    HP_ASSERT(t >= 0 && t < g->n_tensors);
    return &g->tensors[t];
}

hp_node *hp_graph_node(const hp_graph *g, int i) {
    HP_ASSERT(i >= 0 && i < g->n_nodes);
    return &g->nodes[i];
}

const char *hp_tensor_kind_name(hp_tensor_kind k) {
    static const char *n[HP_TENSOR_KIND_COUNT] = {"activation", "param", "input", "opt_state", "const", "state"};
    return (k >= 0 && k < HP_TENSOR_KIND_COUNT) ? n[k] : "?";
}

/* ---- name table ---- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool names_insert(hp_graph *g, hp_tid t) {
    if ((g->n_names + 1) * 2 > g->cap_names) {
        int cap = g->cap_names ? g->cap_names * 2 : 256;
        hp_tid *tab = malloc(sizeof *tab * (size_t)cap);
        if (!tab) return false;
        for (int i = 0; i < cap; i++) tab[i] = HP_TID_NONE;
        for (int i = 0; i < g->cap_names; i++) {
            hp_tid o = g->names[i];
            if (o == HP_TID_NONE) continue;
            uint64_t h = hash_str(g->tensors[o].name) & (uint64_t)(cap - 1);
            while (tab[h] != HP_TID_NONE) h = (h + 1) & (uint64_t)(cap - 1);
            tab[h] = o;
        }
        free(g->names);
        g->names = tab;
        g->cap_names = cap;
    }
    uint64_t h = hash_str(g->tensors[t].name) & (uint64_t)(g->cap_names - 1);
    while (g->names[h] != HP_TID_NONE) h = (h + 1) & (uint64_t)(g->cap_names - 1);
    g->names[h] = t;
    g->n_names++;
    return true;
}

hp_tid hp_graph_find(const hp_graph *g, const char *name) {
    if (!g->cap_names || !name) return HP_TID_NONE;
    uint64_t h = hash_str(name) & (uint64_t)(g->cap_names - 1);
    while (g->names[h] != HP_TID_NONE) {
        if (strcmp(g->tensors[g->names[h]].name, name) == 0) return g->names[h];
        h = (h + 1) & (uint64_t)(g->cap_names - 1);
    }
    return HP_TID_NONE;
}

/* ---- scopes ---- */

static void rebuild_scope(hp_graph *g) {
    size_t len = 0;
    for (int i = 0; i < g->n_scopes; i++) len += strlen(g->scopes[i]) + 1;
    char *s = hp_arena_alloc(g->arena, len + 1, 1);
    if (!s) {
        hp_graph_fail(g, HP_STATUS_OUT_OF_MEMORY, "out of memory building a name scope");
        return;
    }
    s[0] = '\0';
    for (int i = 0; i < g->n_scopes; i++) {
        if (i) strcat(s, ".");
        strcat(s, g->scopes[i]);
    }
    g->scope_str = s;
}

void hp_graph_push_scope(hp_graph *g, const char *name) {
    if (g->n_scopes == MAX_SCOPES) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "name scopes nested deeper than %d at '%s'",
                      MAX_SCOPES, name);
        return;
    }
    g->scopes[g->n_scopes++] = hp_arena_strdup(g->arena, name);
    rebuild_scope(g);
}

void hp_graph_push_scopef(hp_graph *g, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hp_graph_push_scope(g, buf);
}

void hp_graph_pop_scope(hp_graph *g) {
    HP_ASSERT(g->n_scopes > 0);
    g->n_scopes--;
    rebuild_scope(g);
}

void hp_graph_set_node_flags(hp_graph *g, uint32_t flags) { g->node_flags = flags; }

/* ---- tensors ---- */

static hp_tid new_tensor(hp_graph *g, hp_tensor_kind kind, hp_dtype dtype, hp_shape shape) {
    if (g->n_tensors == g->cap_tensors) {
        int cap = g->cap_tensors ? g->cap_tensors * 2 : 256;
        hp_tensor *t = realloc(g->tensors, sizeof *t * (size_t)cap);
        if (!t) {
            hp_graph_fail(g, HP_STATUS_OUT_OF_MEMORY, "out of memory adding tensor %d", g->n_tensors);
            return HP_TID_NONE;
        }
        g->tensors = t;
        g->cap_tensors = cap;
    }
    hp_tensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->shape = shape;
    t->kind = kind;
    t->producer = -1;
    t->grad_of = -1;
    return g->n_tensors++;
}

void hp_graph_set_name(hp_graph *g, hp_tid t, const char *name) {
    if (g->status != HP_STATUS_OK || t == HP_TID_NONE) return;
    char full[1024];
    if (g->n_scopes)
        snprintf(full, sizeof full, "%s.%s", g->scope_str, name);
    else
        snprintf(full, sizeof full, "%s", name);
    hp_graph_set_abs_name(g, t, full);
}

void hp_graph_set_abs_name(hp_graph *g, hp_tid t, const char *name) {
    if (g->status != HP_STATUS_OK || t == HP_TID_NONE) return;
    const char *full = hp_arena_strdup(g->arena, name);
    if (!full) {
        hp_graph_fail(g, HP_STATUS_OUT_OF_MEMORY, "out of memory naming '%s'", name);
        return;
    }
    if (hp_graph_find(g, full) != HP_TID_NONE) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "tensor name '%s' is used twice", full);
        return;
    }
    hp_graph_tensor(g, t)->name = full;
    if (!names_insert(g, t)) hp_graph_fail(g, HP_STATUS_OUT_OF_MEMORY, "out of memory naming '%s'", full);
}

hp_tid hp_leaf(hp_graph *g, const char *name, hp_tensor_kind kind, hp_dtype dtype, hp_shape shape) {
    if (g->status != HP_STATUS_OK) return HP_TID_NONE;
    for (int i = 0; i < shape.ndim; i++) {
        if (shape.dim[i] < 0) {
            hp_graph_fail(g, HP_STATUS_SHAPE, "tensor '%s%s%s' has negative dimension %lld in %s",
                          g->scope_str, g->n_scopes ? "." : "", name ? name : "",
                          (long long)shape.dim[i], hp__shape_s(&shape));
            return HP_TID_NONE;
        }
    }
    hp_tid t = new_tensor(g, kind, dtype, shape);
    if (t == HP_TID_NONE) return t;
    if (name) hp_graph_set_name(g, t, name);
    return g->status == HP_STATUS_OK ? t : HP_TID_NONE;
}

hp_tid hp_param(hp_graph *g, const char *name, hp_shape shape) {
    hp_tid t = hp_leaf(g, name, HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, shape);
    if (t != HP_TID_NONE) hp_graph_tensor(g, t)->requires_grad = true;
    return t;
}

hp_tid hp_input(hp_graph *g, const char *name, hp_dtype dtype, hp_shape shape) {
    return hp_leaf(g, name, HP_TENSOR_KIND_INPUT, dtype, shape);
}

int hp_graph_params(const hp_graph *g, hp_tid *out, int cap) {
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        if (g->tensors[i].kind != HP_TENSOR_KIND_PARAM) continue;
        if (out && n < cap) out[n] = i;
        n++;
    }
    return n;
}

/* ---- nodes ---- */

static const char *tensor_label(const hp_graph *g, hp_tid t, char *buf, size_t n) {
    const hp_tensor *x = &g->tensors[t];
    char s[96];
    if (x->name)
        snprintf(buf, n, "'%s' %s", x->name, hp_shape_str(&x->shape, s, sizeof s));
    else
        snprintf(buf, n, "%%%d %s", t, hp_shape_str(&x->shape, s, sizeof s));
    return buf;
}

hp_tid hp_graph_add_node(hp_graph *g, hp_op op, const hp_tid *inputs, int n_in, const hp_attrs *attrs) {
    if (g->status != HP_STATUS_OK) return HP_TID_NONE;
    if ((int)op < 0 || op >= HP_OP_COUNT) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "unknown operator %d", (int)op);
        return HP_TID_NONE;
    }
    const hp_op_def *d = hp__op_def(op);
    if (n_in < d->min_in || n_in > d->max_in || n_in > HP_MAX_NODE_INPUTS) {
        hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "%s takes %d to %d inputs, got %d (in '%s')",
                      d->name, d->min_in, d->max_in, n_in, g->scope_str);
        return HP_TID_NONE;
    }
    hp_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_in = n_in;
    n.n_out = d->n_out;
    n.flags = g->node_flags;
    n.scope = g->scope_str;
    if (attrs) n.attr = *attrs;
    for (int i = 0; i < HP_MAX_NODE_INPUTS; i++) n.in[i] = HP_TID_NONE;
    for (int j = 0; j < HP_MAX_NODE_OUTPUTS; j++) n.out[j] = HP_TID_NONE;
    bool req = false;
    for (int i = 0; i < n_in; i++) {
        hp_tid t = inputs[i];
        if (t != HP_TID_NONE && (t < 0 || t >= g->n_tensors)) {
            hp_graph_fail(g, HP_STATUS_INVALID_ARGUMENT, "%s input %d is tensor id %d, which does not exist",
                          d->name, i, (int)t);
            return HP_TID_NONE;
        }
        n.in[i] = t;
        if (t != HP_TID_NONE && g->tensors[t].requires_grad) req = true;
    }
    hp_dtype dt[HP_MAX_NODE_OUTPUTS];
    hp_shape sh[HP_MAX_NODE_OUTPUTS];
    memset(dt, 0, sizeof dt);
    memset(sh, 0, sizeof sh);
    hp_status st = d->infer(g, &n, dt, sh);
    if (st != HP_STATUS_OK) {
        char msg[1024], lab[200];
        int off = snprintf(msg, sizeof msg, "%s in '%s': %s; inputs:", d->name,
                           *g->scope_str ? g->scope_str : "(top)", hp_error_message());
        for (int i = 0; i < n_in && off < (int)sizeof msg; i++)
            off += snprintf(msg + off, sizeof msg - (size_t)off, " %s",
                            n.in[i] == HP_TID_NONE ? "none" : tensor_label(g, n.in[i], lab, sizeof lab));
        hp_graph_fail(g, st, "%s", msg);
        return HP_TID_NONE;
    }
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 256;
        hp_node *nn = realloc(g->nodes, sizeof *nn * (size_t)cap);
        if (!nn) {
            hp_graph_fail(g, HP_STATUS_OUT_OF_MEMORY, "out of memory adding node %d", g->n_nodes);
            return HP_TID_NONE;
        }
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    for (int j = 0; j < d->n_out; j++) {
        hp_tid t = new_tensor(g, HP_TENSOR_KIND_ACTIVATION, dt[j], sh[j]);
        if (t == HP_TID_NONE) return HP_TID_NONE;
        g->tensors[t].producer = g->n_nodes;
        g->tensors[t].requires_grad = req;
        n.out[j] = t;
    }
    g->nodes[g->n_nodes++] = n;
    return d->n_out ? n.out[0] : HP_TID_NONE;
}

/* ---- verify and dump ---- */

hp_status hp_graph_verify(const hp_graph *g) {
    if (g->status != HP_STATUS_OK) return hp_error(g->status, "%s", g->error);
    for (int i = 0; i < g->n_nodes; i++) {
        const hp_node *n = &g->nodes[i];
        const hp_op_def *d = hp__op_def(n->op);
        for (int k = 0; k < n->n_in; k++) {
            hp_tid t = n->in[k];
            if (t == HP_TID_NONE) continue;
            if (t < 0 || t >= g->n_tensors)
                return hp_error(HP_STATUS_INTERNAL, "node %d (%s) input %d: bad tensor id %d", i, d->name, k, t);
            if (g->tensors[t].producer >= i)
                return hp_error(HP_STATUS_INTERNAL, "node %d (%s) input %d (%%%d) is used before node %d defines it",
                                i, d->name, k, t, g->tensors[t].producer);
        }
        hp_dtype dt[HP_MAX_NODE_OUTPUTS];
        hp_shape sh[HP_MAX_NODE_OUTPUTS];
        hp_status st = d->infer(g, n, dt, sh);
        if (st != HP_STATUS_OK)
            return hp_error_prefix(HP_STATUS_INTERNAL, "node %d (%s): ", i, d->name);
        for (int j = 0; j < n->n_out; j++) {
            const hp_tensor *o = &g->tensors[n->out[j]];
            if (o->producer != i)
                return hp_error(HP_STATUS_INTERNAL, "node %d (%s) output %d (%%%d) names producer %d",
                                i, d->name, j, n->out[j], o->producer);
            if (!hp_shape_equal(&o->shape, &sh[j]) || o->dtype != dt[j])
                return hp_error(HP_STATUS_INTERNAL, "node %d (%s) output %d is %s %s, inference says %s %s", i,
                                d->name, j, hp_dtype_name(o->dtype), hp__shape_s(&o->shape),
                                hp_dtype_name(dt[j]), hp__shape_s(&sh[j]));
        }
    }
    for (int t = 0; t < g->n_tensors; t++) {
        if (!g->tensors[t].name) continue;
        if (hp_graph_find(g, g->tensors[t].name) != t)
            return hp_error(HP_STATUS_INTERNAL, "tensor name '%s' is not unique", g->tensors[t].name);
    }
    return HP_STATUS_OK;
}

void hp_graph_dump(const hp_graph *g, FILE *f) {
    char s[96], lab[200];
    for (int t = 0; t < g->n_tensors; t++) {
        const hp_tensor *x = &g->tensors[t];
        if (x->producer >= 0) continue;
        fprintf(f, "%%%d = %s %s %s%s%s\n", t, hp_tensor_kind_name(x->kind), hp_dtype_name(x->dtype),
                hp_shape_str(&x->shape, s, sizeof s), x->name ? "  # " : "", x->name ? x->name : "");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const hp_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_out; j++) fprintf(f, "%s%%%d", j ? ", " : "", n->out[j]);
        fprintf(f, "%s%s(", n->n_out ? " = " : "", hp_op_name(n->op));
        for (int k = 0; k < n->n_in; k++)
            fprintf(f, "%s%s", k ? ", " : "",
                    n->in[k] == HP_TID_NONE ? "none" : tensor_label(g, n->in[k], lab, sizeof lab));
        fprintf(f, ")");
        if (n->n_out) fprintf(f, " -> %s", hp_shape_str(&g->tensors[n->out[0]].shape, s, sizeof s));
        if (n->scope && *n->scope) fprintf(f, "  # %s", n->scope);
        if (n->flags & HP_NODE_FLAG_BACKWARD) fprintf(f, " [bwd]");
        if (n->flags & HP_NODE_FLAG_OPTIMIZER) fprintf(f, " [opt]");
        fprintf(f, "\n");
    }
}

hp_status hp_graph_permute_nodes(hp_graph *g, const int *order) {
    hp_node *nn = malloc(sizeof *nn * (size_t)(g->n_nodes ? g->n_nodes : 1));
    unsigned char *seen = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
    if (!nn || !seen) {
        free(nn);
        free(seen);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory reordering %d nodes", g->n_nodes);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (order[i] < 0 || order[i] >= g->n_nodes || seen[order[i]]) {
            free(nn);
            free(seen);
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "node order: order[%d] = %d is %s", i, order[i],
                            order[i] < 0 || order[i] >= g->n_nodes ? "out of range" : "repeated");
        }
        seen[order[i]] = 1;
    }
    free(seen);
    for (int i = 0; i < g->n_nodes; i++) {
        nn[i] = g->nodes[order[i]];
        for (int j = 0; j < nn[i].n_out; j++) g->tensors[nn[i].out[j]].producer = i;
    }
    memcpy(g->nodes, nn, sizeof *nn * (size_t)g->n_nodes);
    free(nn);
    return HP_STATUS_OK;
}
