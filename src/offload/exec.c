/*
 * The runtime instructions of HyperOffload's operators (hp_instr, hp/backend.h), moved out of the
 * CPU backend so that no backend needs the planner's internals. PREFETCH and OFFLOAD queue a copy on
 * the record's copy stream (hp/copy_engine.h) and record the transfer's event; OFFLOAD_WAIT waits
 * for it. ADAMW_STREAM runs AdamW chunk by chunk where the states are (hp_copy_stream_chunks: fast
 * and host buffers in place, disk buffers staged through host memory with the next chunk's read
 * overlapping the update), each chunk's update done by the backend (hp_exec_ctx.team_update: on the
 * CPU shared by the compute team); operands the planner read early into the fast tier are updated in
 * place there and written back. A deferred ADAMW_STREAM (attr.i[0] = 1) queues the same update on
 * the disk stream instead and returns; the next step waits for it (an OFFLOAD_WAIT on its record).
 */
#include "offload/planner_internal.h"

#include <string.h>

hp__ofl_xfer hp__ofl_xfer_make(hp_offload_state *st, hp_tid slow, size_t bytes, hp_event *ev, hp_copy_engine *ce) {
    return (hp__ofl_xfer){
        .instr = {.queue = HP_QUEUE_COPY, .execute = hp__ofl_execute},
        .st = st, .slow = slow, .bytes = bytes, .ev = ev, .ce = ce,
    };
}

/* The write-back record of operand t when the planner read it early into the fast tier, or NULL. */
static hp__ofl_xfer *write_back_of(const hp_offload_state *st, hp_tid t) {
    return st->write_back && t >= 0 && t < st->n_tensors ? st->write_back[t] : NULL;
}

/* One chunk of a deferred update, on the disk stream's worker (its disk operands are staged). */
static void async_chunk(void *user) {
    const hp__ofl_chunk *ch = user;
    const hp__ofl_async *r = ch->rec;
    void *b[4];
    for (int k = 0; k < 4; k++)
        b[k] = r->stage[k] ? r->stage[k] : (void *)((float *)r->loc[k].ptr + ch->first);
    r->update(r->coef, b, ch->count);
}

/* Fills the record of a deferred update (the step's coefficients, where the operands are, the
 * write-backs of early-read copies), then queues what may go before every update still to come. */
static hp_status adamw_deferred(const hp_node_args *a, hp__ofl_async *r, const hp_exec_ctx *ctx) {
    hp_offload_state *st = r->x.st;
    if (!ctx || !ctx->update || ctx->coef_bytes != sizeof r->coef)
        return hp_error(HP_STATUS_INTERNAL, "adamw_stream: the backend gave no update of %zu coefficient bytes",
                        sizeof r->coef);
    memcpy(r->coef, ctx->coef, sizeof r->coef);
    r->update = ctx->update;
    r->chunk_fn = async_chunk;
    for (int k = 0; k < 4; k++) {
        hp_tid t = a->node->in[k];
        r->loc[k] = hp__ofl_loc(st, t, a->in[k]);
        const hp__ofl_xfer *x = write_back_of(st, t);
        r->wb_bytes[k] = x ? x->bytes : 0;
        if (x) {
            r->wb_dst[k] = hp__ofl_loc(st, x->slow, NULL);
            r->wb_src[k] = hp_loc_mem(HP_TIER_DEVICE, a->in[k]);
        }
    }
    r->pending = true;
    return hp__ofl_async_flush(st, r->later_min);
}

static hp_status stream_chunk(void *user, size_t chunk, size_t first, size_t count, void *const *bufs) {
    (void)chunk, (void)first;
    const hp_exec_ctx *ctx = user;
    return ctx->team_update(ctx->user, bufs, count);
}

static hp_status adamw_stream(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    hp__ofl_async *rec = a->node->attr.i[0] == 1 ? (hp__ofl_async *)(void *)self : NULL;
    hp_offload_state *st = rec ? rec->x.st : (hp_offload_state *)(void *)self;
    if (rec && rec->job) return adamw_deferred(a, rec, ctx);
    if (!ctx || !ctx->team_update)
        return hp_error(HP_STATUS_INTERNAL, "adamw_stream: the backend gave no chunk update");
    hp_stream_buffer b[4];
    for (int k = 0; k < 4; k++)
        b[k] = (hp_stream_buffer){hp__ofl_loc(st, a->node->in[k], a->in[k]), sizeof(float), k != 1};
    size_t numel = (size_t)hp_shape_numel(&hp_graph_tensor(a->g, a->node->in[0])->shape);
    size_t chunk = st->chunk_bytes / sizeof(float);
    hp_copy_engine *ce = st->ce; /* operands on disk stream on the disk stream */
    for (int k = 0; k < 4; k++)
        if (b[k].home.tier == HP_TIER_DISK && st->ce_disk) ce = st->ce_disk;
    HP_CHECK(hp_copy_stream_chunks(ce, b, 4, numel, chunk, HP_TIER_HOST, stream_chunk, (void *)ctx));
    if (rec) return adamw_deferred(a, rec, ctx); /* updated in memory: only the write-backs are deferred */
    /* Operands read early into the fast tier (param, m, v) are written back home now; an
     * OFFLOAD_WAIT on the same record keeps the copy alive until the write is done. */
    for (int k = 0; k < 4; k++) {
        hp__ofl_xfer *x = write_back_of(st, a->node->in[k]);
        if (!x) continue;
        HP_CHECK(hp_copy_async(x->ce, hp__ofl_loc(st, x->slow, NULL), hp_loc_mem(HP_TIER_DEVICE, a->in[k]), x->bytes));
        HP_CHECK(hp_event_record(x->ev, x->ce));
    }
    return HP_STATUS_OK;
}

hp_status hp__ofl_execute(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx) {
    hp__ofl_xfer *x = (hp__ofl_xfer *)(void *)self;
    switch (a->node->op) {
    case HP_OP_PREFETCH:
        HP_CHECK(hp_copy_async(x->ce, hp_loc_mem(HP_TIER_DEVICE, a->out[0]), hp__ofl_loc(x->st, x->slow, NULL), x->bytes));
        return hp_event_record(x->ev, x->ce);
    case HP_OP_OFFLOAD:
        HP_CHECK(hp_copy_async(x->ce, hp__ofl_loc(x->st, x->slow, NULL), hp_loc_mem(HP_TIER_DEVICE, a->in[0]), x->bytes));
        return hp_event_record(x->ev, x->ce);
    case HP_OP_OFFLOAD_WAIT: return hp_event_wait(x->ev);
    case HP_OP_ADAMW_STREAM: return adamw_stream(self, a, ctx);
    default:
        return hp_error(HP_STATUS_INTERNAL, "offload instruction on a %s node", hp_op_name(a->node->op));
    }
}

void hp__ofl_mark_instrs(hp_offload_state *s, hp_graph *g) {
    const hp_instr copy = {.queue = HP_QUEUE_COPY, .execute = hp__ofl_execute};
    s->instr = (hp_instr){.queue = HP_QUEUE_COMPUTE, .execute = hp__ofl_execute};
    s->hold.instr = copy;
    for (int k = 0; k < s->n_xfers; k++) s->xfers[k].instr = copy;
    for (int k = 0; k < s->n_async; k++) {
        hp__ofl_async *r = &s->async[k];
        /* The record is both the deferred ADAMW_STREAM's instruction and the next step's wait's. */
        r->x.instr = (hp_instr){.queue = HP_QUEUE_COMPUTE, .execute = hp__ofl_execute, .team_serial = r->job};
    }
    for (int i = 0; i < hp_graph_n_nodes(g); i++) {
        hp_node *n = hp_graph_node(g, i);
        bool ours = n->op == HP_OP_PREFETCH || n->op == HP_OP_OFFLOAD || n->op == HP_OP_OFFLOAD_WAIT ||
                    n->op == HP_OP_ADAMW_STREAM;
        if (ours && n->extra) n->flags |= HP_NODE_FLAG_INSTR;
    }
}

hp_status hp__ofl_set_trace(void *user, hp_trace *tr) {
    hp_offload_state *s = user;
    int track = -1;
    if (tr) HP_CHECK(hp_trace_track(tr, "copy (host)", 40, &track));
    HP_CHECK(hp_copy_engine_set_trace(s->ce, tr, track));
    if (!s->ce_disk) return HP_STATUS_OK;
    if (tr) HP_CHECK(hp_trace_track(tr, "copy (disk)", 41, &track));
    return hp_copy_engine_set_trace(s->ce_disk, tr, track);
}
