/*
 * Running one rank's pipeline step (hp/pipeline.h): the schedule's actions in list order over the
 * program instances (slots), non-blocking point-to-point transfers posted early, then the
 * optimizer (tied-gradient exchange, global norm, clip + AdamW).
 */
#include "mpmd/pipeline_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Message tags: (kind, stage, micro-batch), unique within a step, so the order in which ranks
 * post them never matters. kind 0: activation of stage -> stage + 1; 1: gradient stage -> stage - 1. */
static int tag_of(const hp_pipeline *pp, int kind, int stage, int mb) {
    return (kind * pp->sched->n_stages + stage) * pp->m + mb;
}

hp_status hp__pp_plan_actions(hp_pipeline *pp) {
    const hp_schedule *s = pp->sched;
    int n = s->n_actions[pp->rank];
    const hp_sched_action *act = s->actions[pp->rank];
    pp->plan = calloc((size_t)n + 1, sizeof *pp->plan);
    pp->posted = calloc((size_t)n + 1, sizeof *pp->posted);
    /* per chunk and micro-batch: its slot (-1: none yet); per chunk and slot: the action that last
     * freed it (-1) and whether it is taken */
    int cm = pp->n_chunks * pp->m, cs = pp->n_chunks * (pp->m + 1);
    int *slot_of = malloc(sizeof(int) * (size_t)(cm + 1)), *freed_at = malloc(sizeof(int) * (size_t)(cs + 1));
    int *last = malloc(sizeof(int) * (size_t)(cm + 1)); /* per (chunk, mb): its last action, which frees the slot */
    bool *taken = calloc((size_t)cs + 1, 1);
    hp_status st = HP_STATUS_OK;
    if (!pp->plan || !pp->posted || !slot_of || !freed_at || !taken || !last)
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory planning %d actions", n);
    for (int i = 0; st == HP_STATUS_OK && i < cm; i++) slot_of[i] = -1;
    for (int i = 0; st == HP_STATUS_OK && i < cs; i++) freed_at[i] = -1;
    for (int i = 0; st == HP_STATUS_OK && i < n; i++) {
        const hp_sched_action *a = &act[i];
        int c = a->stage >= 0 && a->stage < s->n_stages ? pp->chunk_of_stage[a->stage] : -1;
        if (c < 0 || a->mb < 0 || a->mb >= pp->m) continue;
        last[c * pp->m + a->mb] = i;
        /* a hand-over between two stages of this rank reads the other stage's slot: F of stage k
         * copies stage k-1's output, B of stage k stage k+1's input gradient */
        int other = a->op == HP_SCHED_OP_F ? a->stage - 1 : a->op == HP_SCHED_OP_B ? a->stage + 1 : -1;
        if (other >= 0 && other < s->n_stages && pp->chunk_of_stage[other] >= 0)
            last[pp->chunk_of_stage[other] * pp->m + a->mb] = i;
    }
    for (int i = 0; st == HP_STATUS_OK && i < n; i++) {
        const hp_sched_action *a = &act[i];
        int c = a->stage >= 0 && a->stage < s->n_stages ? pp->chunk_of_stage[a->stage] : -1;
        if (c < 0 || a->mb < 0 || a->mb >= pp->m) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: rank %d's action %d (%s stage %d mb %d) is not on its stages",
                          pp->rank, i, hp_sched_op_name((hp_sched_op)a->op), a->stage, a->mb);
            break;
        }
        int *so = &slot_of[c * pp->m + a->mb];
        if (*so < 0) { /* the first action of (chunk, mb): the lowest free slot */
            int k = 0;
            while (taken[c * (pp->m + 1) + k]) k++;
            *so = k;
            taken[c * (pp->m + 1) + k] = true;
            if (k + 1 > pp->chunks[c].n_slots) pp->chunks[c].n_slots = k + 1;
        }
        pp->plan[i] = (pp_action_plan){.chunk = c, .slot = *so, .post_after = freed_at[c * (pp->m + 1) + *so]};
        if (last[c * pp->m + a->mb] == i) { /* after its W (or full B) and the send of its gradient */
            taken[c * (pp->m + 1) + *so] = false;
            freed_at[c * (pp->m + 1) + *so] = i;
            *so = -1;
        }
    }
    for (int c = 0; st == HP_STATUS_OK && c < pp->n_chunks; c++) {
        if (pp->chunks[c].n_slots == 0) pp->chunks[c].n_slots = 1;
        pp->chunks[c].slots = calloc((size_t)pp->chunks[c].n_slots, sizeof(pp_slot));
        if (!pp->chunks[c].slots) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for slots");
    }
    free(slot_of);
    free(freed_at);
    free(taken);
    free(last);
    return st;
}

static hp_status wait_req(hp_comm_request **r) {
    if (!*r) return HP_STATUS_OK;
    hp_comm_request *q = *r;
    *r = NULL;
    return hp_comm_wait(q);
}

/* Posts the receive of action i (its slot's buffer is free). */
static hp_status post_recv(hp_pipeline *pp, int i) {
    const hp_sched_action *a = &pp->sched->actions[pp->rank][i];
    pp_chunk *c = &pp->chunks[pp->plan[i].chunk];
    pp_slot *sl = &c->slots[pp->plan[i].slot];
    bool fwd = a->op == HP_SCHED_OP_RECV_F;
    hp_tid t = fwd ? c->gpt.x_in : c->dy;
    void *buf = hp_program_data(sl->p, t);
    pp->posted[i] = true;
    return hp_comm_irecv(pp->comm, buf, c->act_bytes / sizeof(float), HP_DTYPE_F32, a->peer,
                         tag_of(pp, fwd ? 0 : 1, fwd ? a->stage - 1 : a->stage + 1, a->mb), &sl->recv);
}

/* Posts every receive of the list not yet posted whose slot was freed before action `at`. */
static hp_status post_ready(hp_pipeline *pp, int at) {
    int n = pp->sched->n_actions[pp->rank];
    const hp_sched_action *act = pp->sched->actions[pp->rank];
    for (int i = at; i < n; i++) {
        if (pp->posted[i] || (act[i].op != HP_SCHED_OP_RECV_F && act[i].op != HP_SCHED_OP_RECV_B)) continue;
        if (pp->plan[i].post_after >= at) continue;
        pp_slot *sl = &pp->chunks[pp->plan[i].chunk].slots[pp->plan[i].slot];
        if (sl->recv) continue; /* its slot's earlier receive is still pending */
        HP_CHECK(post_recv(pp, i));
    }
    return HP_STATUS_OK;
}

/* The slot of (stage, mb) on this rank, for a hand-over between two stages it holds. */
static pp_slot *local_slot(hp_pipeline *pp, int stage, int mb, int before, pp_chunk **chunk) {
    int c = pp->chunk_of_stage[stage];
    const hp_sched_action *act = pp->sched->actions[pp->rank];
    for (int i = before - 1; i >= 0; i--) /* the latest action of (stage, mb) names the slot */
        if (act[i].stage == stage && act[i].mb == mb) {
            *chunk = &pp->chunks[c];
            return &pp->chunks[c].slots[pp->plan[i].slot];
        }
    return NULL;
}

/* With a trace: the span of a transfer of action a (k: send F, send B, recv F, recv B) from t0. */
static void trace_p2p(hp_pipeline *pp, const hp_sched_action *a, const pp_chunk *c, int k, double t0) {
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    s.name = pp->trace_name[k];
    s.kind = HP_TRACE_KIND_P2P;
    s.stage = (int16_t)a->stage;
    s.microbatch = (int16_t)a->mb;
    s.phase = k % 2 ? HP_TRACE_PHASE_B : HP_TRACE_PHASE_F;
    s.bytes = (double)c->act_bytes;
    hp_trace_end(pp->trace, pp->trace_track, t0, &s);
}

/* With a trace: the span of the step's all-reduce k (4: the loss, 5: the squared gradient norm). */
static void trace_all_reduce(hp_pipeline *pp, int k, double t0) {
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    s.name = pp->trace_name[k];
    s.kind = HP_TRACE_KIND_COMM;
    s.phase = k == 4 ? HP_TRACE_PHASE_NONE : HP_TRACE_PHASE_OPT;
    s.bytes = sizeof(float);
    hp_trace_end(pp->trace, pp->trace_track, t0, &s);
}

/* Waits for the receive into a slot, recorded as "recv F" / "recv B" (k = 2, 3) with a trace. */
static hp_status wait_recv(hp_pipeline *pp, const hp_sched_action *a, const pp_chunk *c, pp_slot *sl, int k) {
    if (!pp->trace || !sl->recv) return wait_req(&sl->recv);
    double t0 = hp_trace_begin(pp->trace);
    hp_status st = wait_req(&sl->recv);
    trace_p2p(pp, a, c, k, t0);
    return st;
}

/* With a trace: tags the slot's program with the action's stage, micro-batch and phase. */
static hp_status trace_tags(hp_pipeline *pp, const hp_sched_action *a, pp_slot *sl, hp_trace_phase phase) {
    if (!pp->trace) return HP_STATUS_OK;
    hp_trace_tags t = {.stage = a->stage, .microbatch = a->mb, .phase = phase};
    return hp_program_set_trace(sl->p, pp->trace, &t);
}

static hp_status run_action(hp_pipeline *pp, int i, const int32_t *tokens, const int32_t *targets, double *loss_sum) {
    const hp_schedule *s = pp->sched;
    const hp_sched_action *a = &s->actions[pp->rank][i];
    pp_chunk *c = &pp->chunks[pp->plan[i].chunk];
    pp_slot *sl = &c->slots[pp->plan[i].slot];
    size_t rows_bytes = (size_t)pp->rows * (size_t)pp->seq * sizeof(int32_t);
    double t0 = hp_trace_begin(pp->trace);
    hp_status st;
    switch ((hp_sched_op)a->op) {
    case HP_SCHED_OP_RECV_F:
    case HP_SCHED_OP_RECV_B:
        if (!pp->posted[i]) {
            HP_CHECK(wait_req(&sl->recv)); /* an earlier receive into the slot, already consumed */
            HP_CHECK(post_recv(pp, i));
        }
        return HP_STATUS_OK;
    case HP_SCHED_OP_SEND_F:
        st = hp_comm_isend(pp->comm, hp_program_data(sl->p, c->gpt.x_out), c->act_bytes / sizeof(float), HP_DTYPE_F32,
                           a->peer, tag_of(pp, 0, a->stage, a->mb), &sl->send_f);
        if (pp->trace) trace_p2p(pp, a, c, 0, t0);
        return st;
    case HP_SCHED_OP_SEND_B:
        st = hp_comm_isend(pp->comm, hp_program_data(sl->p, c->dx), c->act_bytes / sizeof(float), HP_DTYPE_F32,
                           a->peer, tag_of(pp, 1, a->stage, a->mb), &sl->send_b);
        if (pp->trace) trace_p2p(pp, a, c, 1, t0);
        return st;
    case HP_SCHED_OP_F:
        HP_CHECK(wait_req(&sl->send_f)); /* the slot's last activation has left */
        if (c->part.embedding) {
            HP_CHECK(hp_program_set_input(sl->p, c->gpt.tokens, tokens + (size_t)a->mb * pp->rows * pp->seq, rows_bytes));
        } else if (s->stage_rank[a->stage - 1] == pp->rank) { /* the previous stage is here: copy */
            pp_chunk *pc;
            pp_slot *ps = local_slot(pp, a->stage - 1, a->mb, i, &pc);
            if (!ps) return hp_error(HP_STATUS_INTERNAL, "pipeline: F of stage %d mb %d before its input", a->stage, a->mb);
            memcpy(hp_program_data(sl->p, c->gpt.x_in), hp_program_data(ps->p, pc->gpt.x_out), c->act_bytes);
        } else {
            HP_CHECK(wait_recv(pp, a, c, sl, 2));
        }
        if (c->part.head)
            HP_CHECK(hp_program_set_input(sl->p, c->gpt.targets, targets + (size_t)a->mb * pp->rows * pp->seq, rows_bytes));
        HP_CHECK(trace_tags(pp, a, sl, HP_TRACE_PHASE_F));
        HP_CHECK(hp_program_run_nodes(sl->p, 0, c->f_end));
        if (c->part.head) *loss_sum += *(const float *)hp_program_data(sl->p, c->gpt.loss);
        return HP_STATUS_OK;
    case HP_SCHED_OP_B:
        HP_CHECK(wait_req(&sl->send_b));
        if (!c->part.head) {
            if (s->stage_rank[a->stage + 1] == pp->rank) {
                pp_chunk *nc;
                pp_slot *ns = local_slot(pp, a->stage + 1, a->mb, i, &nc);
                if (!ns) return hp_error(HP_STATUS_INTERNAL, "pipeline: B of stage %d mb %d before its gradient", a->stage, a->mb);
                memcpy(hp_program_data(sl->p, c->dy), hp_program_data(ns->p, nc->dx), c->act_bytes);
            } else {
                HP_CHECK(wait_recv(pp, a, c, sl, 3));
            }
        }
        HP_CHECK(trace_tags(pp, a, sl, HP_TRACE_PHASE_B));
        return hp_program_run_nodes(sl->p, c->f_end,
                                    (a->flags & HP_SCHED_FLAG_FULL_BACKWARD) ? c->n_nodes : c->b_end);
    case HP_SCHED_OP_W:
        HP_CHECK(trace_tags(pp, a, sl, HP_TRACE_PHASE_W));
        return hp_program_run_nodes(sl->p, c->b_end, c->n_nodes);
    default:
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: action op %d", a->op);
    }
}

/* Sums the two copies' gradients of a tied embedding held on two ranks (both get a + b). */
static hp_status exchange_tied(hp_pipeline *pp) {
    hp_store_entry_info e;
    HP_CHECK(hp_store_info(pp->store, "grad_acc.wte.weight", &e));
    float *acc = hp_store_data(pp->store, "grad_acc.wte.weight");
    size_t n = (size_t)hp_shape_numel(&e.local_shape);
    float *other = malloc(n * sizeof *other + 1);
    if (!other) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for the tied gradient");
    hp_comm_request *r = NULL;
    int tag = tag_of(pp, 2, 0, 0);
    hp_status st = hp_comm_irecv(pp->comm, other, n, HP_DTYPE_F32, pp->tied_peer, tag, &r);
    if (st == HP_STATUS_OK) st = hp_comm_send(pp->comm, acc, n, HP_DTYPE_F32, pp->tied_peer, tag);
    hp_status wst = r ? hp_comm_wait(r) : HP_STATUS_OK;
    if (st == HP_STATUS_OK) st = wst;
    if (st == HP_STATUS_OK) {
        for (size_t k = 0; k < n; k++) acc[k] += other[k]; /* a + b == b + a: the copies stay equal */
        st = hp_store_touch(pp->store, "grad_acc.wte.weight");
    }
    free(other);
    return st;
}

hp_status hp_pipeline_forward_backward(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float *loss) {
    int n = pp->sched->n_actions[pp->rank];
    memset(pp->posted, 0, (size_t)n * sizeof *pp->posted);
    double loss_sum = 0;
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < n && st == HP_STATUS_OK; i++) {
        st = post_ready(pp, i);
        if (st == HP_STATUS_OK) st = run_action(pp, i, tokens, targets, &loss_sum);
        if (st != HP_STATUS_OK) {
            const hp_sched_action *a = &pp->sched->actions[pp->rank][i];
            st = hp_error_prefix(st, "pipeline rank %d, action %d (%s stage %d mb %d): ", pp->rank, i,
                                 hp_sched_op_name((hp_sched_op)a->op), a->stage, a->mb);
        }
    }
    for (int c = 0; c < pp->n_chunks; c++) /* every transfer done (a failed step drains them too) */
        for (int k = 0; k < pp->chunks[c].n_slots; k++) {
            pp_slot *sl = &pp->chunks[c].slots[k];
            hp_status w1 = wait_req(&sl->send_f), w2 = wait_req(&sl->send_b), w3 = wait_req(&sl->recv);
            if (st == HP_STATUS_OK) st = w1 != HP_STATUS_OK ? w1 : w2 != HP_STATUS_OK ? w2 : w3;
        }
    HP_CHECK(st);
    if (pp->tied_exchange) HP_CHECK(exchange_tied(pp));
    float mine = (float)(loss_sum / pp->m), total = 0; /* only the last stage's rank has a loss */
    double t0 = hp_trace_begin(pp->trace);
    HP_CHECK(hp_comm_all_reduce(pp->comm, &mine, &total, 1, HP_DTYPE_F32, HP_REDUCE_SUM));
    if (pp->trace) trace_all_reduce(pp, 4, t0);
    if (loss) *loss = total;
    return HP_STATUS_OK;
}

hp_status hp_pipeline_update(hp_pipeline *pp, float lr, float *grad_norm) {
    HP_CHECK(hp_program_run(pp->norm_p));
    float mine = *(const float *)hp_program_data(pp->norm_p, pp->norm_out), grad_sq = 0;
    double t0 = hp_trace_begin(pp->trace);
    HP_CHECK(hp_comm_all_reduce(pp->comm, &mine, &grad_sq, 1, HP_DTYPE_F32, HP_REDUCE_SUM));
    if (pp->trace) trace_all_reduce(pp, 5, t0);
    pp->step++;
    float step_f = (float)pp->step;
    HP_CHECK(hp_program_set_input(pp->opt_p, pp->opt_lr, &lr, sizeof lr));
    HP_CHECK(hp_program_set_input(pp->opt_p, pp->opt_step, &step_f, sizeof step_f));
    HP_CHECK(hp_program_set_input(pp->opt_p, pp->opt_grad_sq, &grad_sq, sizeof grad_sq));
    HP_CHECK(hp_program_run(pp->opt_p));
    if (grad_norm) *grad_norm = sqrtf(grad_sq);
    return HP_STATUS_OK;
}

hp_status hp_pipeline_step(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float lr, float *loss,
                           float *grad_norm) {
    HP_CHECK(hp_pipeline_forward_backward(pp, tokens, targets, loss));
    return hp_pipeline_update(pp, lr, grad_norm);
}
