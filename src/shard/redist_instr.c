/*
 * The runtime instruction of a REDISTRIBUTE node (hp/instr.h): a collective on the queue of the mesh
 * axes its plan uses. The runtime gives every group of overlapping axes its own ordered queue; the
 * program order of REDISTRIBUTE nodes is the same on every rank (partition.c), so every member of a
 * group issues the group's collectives in the same order.
 */
#include "shard/partition_internal.h"

#include <stdio.h>
#include <string.h>

static hp_status redist_execute(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    (void)ctx;
    hp__redist_extra *x = (hp__redist_extra *)(void *)self;
    if (x->n_groups > 0) /* a ragged plan: the counts are input 1 */
        return hp_redistribute_execute_counts(&x->plan, x->mesh, a->in[0], a->in[1], x->n_groups, a->out[0]);
    return hp_redistribute_execute(&x->plan, x->mesh, a->in[0], a->out[0]);
}

/* Creates (collectively, in program order) the sub-communicators the plan's steps use, so that
 * queues running concurrently only read the mesh's cache. */
static hp_status redist_prepare(hp_instr *self) {
    hp__redist_extra *x = (hp__redist_extra *)(void *)self;
    hp_comm *c;
    for (int k = 0; k < x->plan.nsteps; k++) {
        const hp_redist_step *s = &x->plan.steps[k];
        if (s->kind == HP_REDIST_LOCAL_SLICE || s->kind == HP_REDIST_LOCAL_PARTIAL || s->axis < 0) continue;
        HP_CHECK(hp_mesh_axes_comm(x->mesh, 1, &s->axis, &c));
    }
    return HP_STATUS_OK;
}

/* A plan of one ALL_REDUCE step: the all-reduce of the local block, started non-blocking. */
static hp_status redist_start(hp_instr *self, const hp_node_args *a, hp_comm_request **req) {
    hp__redist_extra *x = (hp__redist_extra *)(void *)self;
    const hp_redist_step *s = &x->plan.steps[0];
    hp_comm *c;
    hp_shape ls;
    HP_CHECK(hp_mesh_axes_comm(x->mesh, 1, &s->axis, &c));
    HP_CHECK(hp_layout_local_shape(&s->before, x->mesh, &x->plan.shape, hp_mesh_my_index(x->mesh), &ls));
    return hp_comm_iall_reduce(c, a->in[0], a->out[0], (size_t)hp_shape_numel(&ls), x->plan.dtype, s->before.partial_op,
                               req);
}

/* Appends `s` to buf (of n bytes), after a `sep` unless buf is empty; truncates quietly. */
static void append(char *buf, size_t n, const char *sep, const char *s) {
    size_t len = strlen(buf);
    if (len + 1 < n) snprintf(buf + len, n - len, "%s%s", len ? sep : "", s);
}

/* The plan's collectives for the cost model: one per step that moves data; the all-to-allv over the
 * whole mesh counts as an all-to-all of the mesh. */
static int redist_xfers(const hp_instr *self, hp_xfer *out, int max) {
    const hp__redist_extra *x = (const hp__redist_extra *)(const void *)self;
    int n = 0;
    for (int k = 0; k < x->plan.nsteps; k++) {
        const hp_redist_step *s = &x->plan.steps[k];
        hp_xfer_kind kind;
        switch (s->kind) {
        case HP_REDIST_ALL_GATHER: kind = HP_XFER_ALL_GATHER; break;
        case HP_REDIST_REDUCE_SCATTER: kind = HP_XFER_REDUCE_SCATTER; break;
        case HP_REDIST_ALL_REDUCE: kind = HP_XFER_ALL_REDUCE; break;
        case HP_REDIST_ALL_TO_ALL:
        case HP_REDIST_ALL_TO_ALLV:
        case HP_REDIST_RAGGED_ALL_TO_ALLV: kind = HP_XFER_ALL_TO_ALL; break;
        case HP_REDIST_SEND_RECV: kind = HP_XFER_SEND_RECV; break;
        default: continue; /* local steps move nothing */
        }
        int group = s->kind == HP_REDIST_SEND_RECV ? 2 : s->axis >= 0 ? hp_mesh_dim(x->mesh, s->axis) : hp_mesh_size(x->mesh);
        if (n < max) out[n] = (hp_xfer){.kind = kind, .group = group, .bytes = (double)s->bytes};
        n++;
    }
    return n;
}

void hp__redist_instr_init(hp__redist_extra *x) {
    uint32_t axes = 0;
    bool all = false;
    x->label[0] = x->group_name[0] = '\0';
    for (int k = 0; k < x->plan.nsteps; k++) {
        const hp_redist_step *s = &x->plan.steps[k];
        if (s->kind == HP_REDIST_LOCAL_SLICE || s->kind == HP_REDIST_LOCAL_PARTIAL) continue;
        append(x->label, sizeof x->label, "+", hp_redist_kind_name(s->kind));
        if (s->axis < 0) all = true; /* ALL_TO_ALLV: the whole mesh */
        else axes |= 1u << s->axis;
    }
    if (!x->label[0]) snprintf(x->label, sizeof x->label, "%s", "local");
    for (int a = 0; a < hp_mesh_naxes(x->mesh) && !all; a++)
        if (axes & (1u << a)) append(x->group_name, sizeof x->group_name, ",", hp_mesh_axis_name(x->mesh, a));
    if (all || !x->group_name[0]) snprintf(x->group_name, sizeof x->group_name, "%s", "mesh");
    x->instr = (hp_instr){
        .queue = HP_QUEUE_COLLECTIVE,
        .group = x->mesh,
        .axes = all ? 0u : axes,
        .bytes = (double)x->plan.bytes,
        .execute = redist_execute,
        .prepare = redist_prepare,
        .start = x->plan.nsteps == 1 && x->plan.steps[0].kind == HP_REDIST_ALL_REDUCE ? redist_start : NULL,
        .label = x->label,
        .group_name = x->group_name,
        .xfers = redist_xfers,
    };
}
