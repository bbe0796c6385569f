/*
 * The runtime instruction of a REDISTRIBUTE node (hp/instr.h): a collective on the queue of the mesh
 * axes its plan uses. The runtime gives every group of overlapping axes its own ordered queue; the
 * program order of REDISTRIBUTE nodes is the same on every rank (partition.c), so every member of a
 * group issues the group's collectives in the same order.
 */
#include "shard/partition_internal.h"

static hp_status redist_execute(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    (void)ctx;
    hp__redist_extra *x = (hp__redist_extra *)(void *)self;
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

void hp__redist_instr_init(hp__redist_extra *x) {
    uint32_t axes = 0;
    bool all = false;
    for (int k = 0; k < x->plan.nsteps; k++) {
        const hp_redist_step *s = &x->plan.steps[k];
        if (s->kind == HP_REDIST_LOCAL_SLICE || s->kind == HP_REDIST_LOCAL_PARTIAL) continue;
        if (s->axis < 0) all = true; /* ALL_TO_ALLV: the whole mesh */
        else axes |= 1u << s->axis;
    }
    x->instr = (hp_instr){
        .queue = HP_QUEUE_COLLECTIVE,
        .group = x->mesh,
        .axes = all ? 0u : axes,
        .bytes = (double)x->plan.bytes,
        .execute = redist_execute,
        .prepare = redist_prepare,
        .start = x->plan.nsteps == 1 && x->plan.steps[0].kind == HP_REDIST_ALL_REDUCE ? redist_start : NULL,
    };
}
