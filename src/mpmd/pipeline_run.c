/*
 * Running one rank's pipeline step (hp/pipeline.h): the schedule's actions in list order over the
 * program instances (slots), non-blocking point-to-point transfers posted early, then the
 * optimizer (tied-gradient exchange, global norm, clip + AdamW).
 */
#include "mpmd/pipeline_internal.h"

#include <math.h>
#include <stdio.h>
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
        /* free the slots whose last use this is: its own (after its W, or full B, and the send of
         * its gradient) and another local stage's it read in a hand-over */
        int other = a->op == HP_SCHED_OP_F ? a->stage - 1 : a->op == HP_SCHED_OP_B ? a->stage + 1 : -1;
        int oc = other >= 0 && other < s->n_stages ? pp->chunk_of_stage[other] : -1;
        for (int pass = 0; pass < 2; pass++) {
            int cc = pass == 0 ? c : oc;
            if (cc < 0 || last[cc * pp->m + a->mb] != i) continue;
            int *sp = &slot_of[cc * pp->m + a->mb];
            if (*sp < 0) continue;
            taken[cc * (pp->m + 1) + *sp] = false;
            freed_at[cc * (pp->m + 1) + *sp] = i;
            *sp = -1;
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

hp_status hp__pp_reqs_wait(pp_reqs *q) {
    hp_status st = HP_STATUS_OK;
    for (int k = 0; k < q->n; k++) {
        hp_status w = hp_comm_wait(q->r[k]);
        if (st == HP_STATUS_OK) st = w;
    }
    q->n = 0;
    return st;
}

static hp_status reqs_room(hp_pipeline *pp, pp_reqs *q) {
    if (q->r) return HP_STATUS_OK;
    q->r = calloc((size_t)pp->max_group, sizeof *q->r);
    return q->r ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for transfers");
}

/* Which process of replica j of group r sends rows held by its process i to a receiver of
 * model-parallel index k: the holders of those rows are the replica's processes with i's block
 * (copies of each other), and the receiver takes them from holder k mod their number (index order).
 * Groups without blocks: every process of the replica holds them, so holder k mod t as before. */
static int holder(const hp_pipeline *pp, int r, int j, int i, int k) {
    int t = pp->grp_pn[r], o = pp->grp_off[r] + j * t, n = 0;
    for (int x = 0; x < t; x++) n += pp->grp_b0[o + x] == pp->grp_b0[o + i] && pp->grp_bn[o + x] == pp->grp_bn[o + i];
    for (int x = 0, want = k % n; x < t; x++)
        if (pp->grp_b0[o + x] == pp->grp_b0[o + i] && pp->grp_bn[o + x] == pp->grp_bn[o + i] && want-- == 0) return x;
    return i;
}

/* One transfer of a (rows, seq, C) activation or gradient `buf` (this process's hand-off block of
 * its replica's rows, pp->grp_b0/grp_bn) with the processes of pipeline rank `peer`'s group whose
 * blocks overlap it: a send of each overlap this process is the holder for, or a receive of each
 * overlap from its holder (holder()). Both sides compute the same pairs; every pair of processes
 * moves at most one contiguous run of rows per (kind, stage, micro-batch). */
static hp_status transfer(hp_pipeline *pp, bool send, float *buf, int peer, int tag, pp_reqs *q) {
    HP_CHECK(reqs_room(pp, q));
    int d = pp->grp_dp[peer], tp = pp->grp_pn[peer];
    int mine = pp->grp_off[pp->rank] + pp->replica * pp->grp_pn[pp->rank] + pp->pi;
    int m0 = pp->row0 + pp->grp_b0[mine], m1 = m0 + pp->grp_bn[mine]; /* this process's rows of the micro-batch */
    size_t row = (size_t)pp->seq * (size_t)pp->model.width;
    for (int j = 0; j < d; j++) {
        int a0, a1;
        hp__pp_rows(pp->rows_mb, d, j, &a0, &a1);
        if (a1 <= m0 || a0 >= m1) continue;
        for (int i = 0; i < tp; i++) {
            int at = pp->grp_off[peer] + j * tp + i, b0 = a0 + pp->grp_b0[at], b1 = b0 + pp->grp_bn[at];
            int lo = b0 > m0 ? b0 : m0, hi = b1 < m1 ? b1 : m1;
            if (lo >= hi) continue;
            if (send ? holder(pp, pp->rank, pp->replica, pp->pi, i) != pp->pi : holder(pp, peer, j, i, pp->pi) != i)
                continue;
            float *from = buf + (size_t)(lo - m0) * row;
            size_t count = (size_t)(hi - lo) * row;
            hp_comm_request **r = &q->r[q->n];
            HP_CHECK(send ? hp_comm_isend(pp->comm, from, count, HP_DTYPE_F32, pp->grp_ranks[at], tag, r)
                          : hp_comm_irecv(pp->comm, from, count, HP_DTYPE_F32, pp->grp_ranks[at], tag, r));
            q->n++;
            if (send) pp->stats.bytes_sent += (int64_t)(count * sizeof(float));
        }
    }
    return HP_STATUS_OK;
}

/* Posts the receive of action i (its slot's buffer is free). */
static hp_status post_recv(hp_pipeline *pp, int i) {
    const hp_sched_action *a = &pp->sched->actions[pp->rank][i];
    pp_chunk *c = &pp->chunks[pp->plan[i].chunk];
    pp_slot *sl = &c->slots[pp->plan[i].slot];
    bool fwd = a->op == HP_SCHED_OP_RECV_F;
    float *buf = fwd ? (sl->xin ? sl->xin : hp_program_data(sl->p, c->gpt.x_in))
                     : (sl->dyin ? sl->dyin : hp_program_data(sl->p, c->dy));
    pp->posted[i] = true;
    return transfer(pp, false, buf, a->peer, tag_of(pp, fwd ? 0 : 1, fwd ? a->stage - 1 : a->stage + 1, a->mb),
                    &sl->recv);
}

/* Posts every receive of the list not yet posted whose slot was freed before action `at`. */
static hp_status post_ready(hp_pipeline *pp, int at) {
    int n = pp->sched->n_actions[pp->rank];
    const hp_sched_action *act = pp->sched->actions[pp->rank];
    for (int i = at; i < n; i++) {
        if (pp->posted[i] || (act[i].op != HP_SCHED_OP_RECV_F && act[i].op != HP_SCHED_OP_RECV_B)) continue;
        if (pp->plan[i].post_after >= at) continue;
        pp_slot *sl = &pp->chunks[pp->plan[i].chunk].slots[pp->plan[i].slot];
        if (sl->recv.n) continue; /* its slot's earlier receive is still pending */
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
    s.bytes = (double)c->act_bytes; /* the replica's rows; with blocks, this rank's block of them */
    if (pp->hand_blocks && pp->rows > 0) s.bytes = (double)c->act_bytes / pp->rows * c->blkn;
    hp_trace_end(pp->trace, pp->trace_track, t0, &s);
}

/* With a trace: the span of an all-reduce of `bytes` (k = 4: the loss, 5: the squared gradient
 * norm, 6: a gradient accumulator over the stage's group or the tied copies). */
static void trace_all_reduce(hp_pipeline *pp, int k, double t0, double bytes) {
    hp_trace_span s = HP_TRACE_SPAN_INIT;
    s.name = pp->trace_name[k];
    s.kind = HP_TRACE_KIND_COMM;
    s.phase = k == 4 ? HP_TRACE_PHASE_NONE : HP_TRACE_PHASE_OPT;
    s.bytes = bytes;
    hp_trace_end(pp->trace, pp->trace_track, t0, &s);
}

/* Waits for the receive into a slot, recorded as "recv F" / "recv B" (k = 2, 3) with a trace. */
static hp_status wait_recv(hp_pipeline *pp, const hp_sched_action *a, const pp_chunk *c, pp_slot *sl, int k) {
    if (!pp->trace || !sl->recv.n) return hp__pp_reqs_wait(&sl->recv);
    double t0 = hp_trace_begin(pp->trace);
    hp_status st = hp__pp_reqs_wait(&sl->recv);
    trace_p2p(pp, a, c, k, t0);
    return st;
}

/* With a trace: tags the slot's program with the action's stage, micro-batch and phase. */
static hp_status trace_tags(hp_pipeline *pp, const hp_sched_action *a, pp_slot *sl, hp_trace_phase phase) {
    if (!pp->trace) return HP_STATUS_OK;
    hp_trace_tags t = {.stage = a->stage, .microbatch = a->mb, .phase = phase};
    return hp_program_set_trace(sl->p, pp->trace, &t);
}

/* This rank's block of a replica's rows: rows [blk0, blk0 + blkn) and, with sequence parallelism,
 * positions [sq0, sq0 + sqn) of each, `elem` bytes per position, from `src` (the replica's rows,
 * seq positions each) into the contiguous `dst`. */
static void copy_block(const pp_chunk *c, int seq, size_t elem, void *dst, const void *src) {
    size_t run = (size_t)c->sqn * elem, row = (size_t)seq * elem;
    const char *from = (const char *)src + (size_t)c->blk0 * row + (size_t)c->sq0 * elem;
    if (c->sqn == seq) {
        memcpy(dst, from, (size_t)c->blkn * row);
        return;
    }
    for (int r = 0; r < c->blkn; r++) memcpy((char *)dst + (size_t)r * run, from + (size_t)r * row, run);
}

/* A hand-over between two stages of this rank (one group): the previous stage's output or the next
 * one's input gradient `src` into `dst`, a block of rows already when the group hands by blocks. */
static void copy_local(const hp_pipeline *pp, const pp_chunk *c, void *dst, const void *src) {
    size_t act = (size_t)pp->model.width * sizeof(float);
    if (pp->hand_blocks) memcpy(dst, src, (size_t)c->blkn * (size_t)pp->seq * act);
    else copy_block(c, pp->seq, act, dst, src);
}

/* Sets a program's tokens or targets to this rank's block of the replica's rows (sequence
 * parallelism: a block of each row's positions, gathered into a staging copy first). */
static hp_status set_ids(hp_pipeline *pp, const pp_chunk *c, hp_program *p, hp_tid t, const int32_t *replica_rows) {
    size_t bytes = (size_t)c->blkn * (size_t)c->sqn * sizeof(int32_t);
    if (c->sqn == pp->seq) return hp_program_set_input(p, t, replica_rows + (size_t)c->blk0 * (size_t)pp->seq, bytes);
    int32_t *buf = malloc(bytes);
    if (!buf) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: %zu bytes of token ids", bytes);
    copy_block(c, pp->seq, sizeof(int32_t), buf, replica_rows);
    hp_status st = hp_program_set_input(p, t, buf, bytes);
    free(buf);
    return st;
}

static hp_status run_action(hp_pipeline *pp, int i, const int32_t *tokens, const int32_t *targets, double *loss_sum) {
    const hp_schedule *s = pp->sched;
    const hp_sched_action *a = &s->actions[pp->rank][i];
    pp_chunk *c = &pp->chunks[pp->plan[i].chunk];
    pp_slot *sl = &c->slots[pp->plan[i].slot];
    double t0 = hp_trace_begin(pp->trace);
    hp_status st;
    /* this rank's rows of the batch: its replica's (then set_ids and copy_block take its block) */
    size_t replica_row = ((size_t)a->mb * pp->rows_mb + pp->row0) * (size_t)pp->seq;
    size_t act = (size_t)pp->model.width * sizeof(float); /* one position's activation */
    switch ((hp_sched_op)a->op) {
    case HP_SCHED_OP_RECV_F:
    case HP_SCHED_OP_RECV_B:
        if (!pp->posted[i]) {
            HP_CHECK(hp__pp_reqs_wait(&sl->recv)); /* an earlier receive into the slot, already consumed */
            HP_CHECK(post_recv(pp, i));
        }
        return HP_STATUS_OK;
    case HP_SCHED_OP_SEND_F:
        st = transfer(pp, true, hp_program_data(sl->p, c->gpt.x_out), a->peer, tag_of(pp, 0, a->stage, a->mb),
                      &sl->send_f);
        if (pp->trace) trace_p2p(pp, a, c, 0, t0);
        return st;
    case HP_SCHED_OP_SEND_B:
        st = transfer(pp, true, hp_program_data(sl->p, c->dx), a->peer, tag_of(pp, 1, a->stage, a->mb), &sl->send_b);
        if (pp->trace) trace_p2p(pp, a, c, 1, t0);
        return st;
    case HP_SCHED_OP_F:
        HP_CHECK(hp__pp_reqs_wait(&sl->send_f)); /* the slot's last activation has left */
        if (c->part.embedding) {
            HP_CHECK(set_ids(pp, c, sl->p, c->gpt.tokens, tokens + replica_row));
        } else if (s->stage_rank[a->stage - 1] == pp->rank) { /* the previous stage is here: copy */
            pp_chunk *pc;
            pp_slot *ps = local_slot(pp, a->stage - 1, a->mb, i, &pc);
            if (!ps) return hp_error(HP_STATUS_INTERNAL, "pipeline: F of stage %d mb %d before its input", a->stage, a->mb);
            copy_local(pp, c, hp_program_data(sl->p, c->gpt.x_in), hp_program_data(ps->p, pc->gpt.x_out));
        } else {
            HP_CHECK(wait_recv(pp, a, c, sl, 2));
            if (sl->xin) copy_block(c, pp->seq, act, hp_program_data(sl->p, c->gpt.x_in), sl->xin);
        }
        if (c->part.head) HP_CHECK(set_ids(pp, c, sl->p, c->gpt.targets, targets + replica_row));
        if (c->row0 != HP_TID_NONE) { /* dropout: the step's masks at this micro-batch's rows */
            int32_t row0 = a->mb * pp->rows_mb + pp->row0;
            float step = (float)(pp->step + 1);
            HP_CHECK(hp_program_set_input(sl->p, c->row0, &row0, sizeof row0));
            HP_CHECK(hp_program_set_input(sl->p, c->gpt.step, &step, sizeof step));
        }
        HP_CHECK(trace_tags(pp, a, sl, HP_TRACE_PHASE_F));
        double t0 = hp_now_seconds();
        HP_CHECK(hp_program_run_nodes(sl->p, 0, sl->f_end));
        pp->stats.f_seconds += hp_now_seconds() - t0;
        pp->stats.n_f++;
        if (c->part.head) /* this rank's share of the micro-batch's mean */
            *loss_sum += *(const float *)hp_program_data(sl->p, c->gpt.loss) * ((double)pp->rows / pp->rows_mb);
        return HP_STATUS_OK;
    case HP_SCHED_OP_B:
        HP_CHECK(hp__pp_reqs_wait(&sl->send_b));
        if (!c->part.head) {
            if (s->stage_rank[a->stage + 1] == pp->rank) {
                pp_chunk *nc;
                pp_slot *ns = local_slot(pp, a->stage + 1, a->mb, i, &nc);
                if (!ns) return hp_error(HP_STATUS_INTERNAL, "pipeline: B of stage %d mb %d before its gradient", a->stage, a->mb);
                copy_local(pp, c, hp_program_data(sl->p, c->dy), hp_program_data(ns->p, nc->dx));
            } else {
                HP_CHECK(wait_recv(pp, a, c, sl, 3));
                if (sl->dyin) copy_block(c, pp->seq, act, hp_program_data(sl->p, c->dy), sl->dyin);
            }
        }
        HP_CHECK(trace_tags(pp, a, sl, HP_TRACE_PHASE_B));
        double tb = hp_now_seconds();
        HP_CHECK(hp_program_run_nodes(sl->p, sl->f_end, (a->flags & HP_SCHED_FLAG_FULL_BACKWARD) ? sl->n_nodes : sl->b_end));
        pp->stats.b_seconds += hp_now_seconds() - tb;
        pp->stats.n_b++;
        return HP_STATUS_OK;
    case HP_SCHED_OP_W: {
        HP_CHECK(trace_tags(pp, a, sl, HP_TRACE_PHASE_W));
        double tw = hp_now_seconds();
        HP_CHECK(hp_program_run_nodes(sl->p, sl->b_end, sl->n_nodes));
        pp->stats.w_seconds += hp_now_seconds() - tw;
        pp->stats.n_w++;
        return HP_STATUS_OK;
    }
    default:
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: action op %d", a->op);
    }
}

/* Sums the gradients the processes computed: over the group's replicas (each took some rows of
 * every micro-batch), and a tied embedding's over the first and last stages' groups too (its two
 * copies then get the same sum, so they stay equal). */
hp_status hp__pp_reduce_gradients(hp_pipeline *pp) {
    /* the tied copy first (over the two groups), then the group's own (so no two communicators'
     * collectives are waited for in different orders) */
    for (int k = 0; k < 2 * hp_store_n_entries(pp->store); k++) {
        int pass = k / hp_store_n_entries(pp->store), i = k % hp_store_n_entries(pp->store);
        const char *name = hp_store_name(pp->store, i);
        if (strncmp(name, "grad_acc.", 9)) continue;
        bool tied = pp->tied_exchange && !strcmp(name + 9, hp_gpt_embedding_name(&pp->model));
        if (tied != (pass == 0)) continue;
        hp_comm *c = tied ? pp->tied_comm : pp->stage_comm;
        if (!c) continue;
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(pp->store, name, &e));
        float *acc = hp_store_data(pp->store, name);
        double t0 = hp_trace_begin(pp->trace);
        HP_CHECK(hp_comm_all_reduce(c, acc, acc, (size_t)hp_shape_numel(&e.local_shape), HP_DTYPE_F32, HP_REDUCE_SUM));
        if (pp->trace) trace_all_reduce(pp, 6, t0, (double)e.bytes);
        HP_CHECK(hp_store_touch(pp->store, name));
    }
    return HP_STATUS_OK;
}

void hp_pipeline_get_stats(const hp_pipeline *pp, hp_pipeline_stats *out) {
    *out = pp->stats;
    out->busy_seconds = out->f_seconds + out->b_seconds + out->w_seconds;
    out->bytes_offloaded = out->bytes_to_disk = out->bytes_from_disk = 0;
    for (int c = 0; c < pp->n_chunks; c++)
        for (int k = 0; k < pp->chunks[c].n_slots; k++) {
            if (!pp->chunks[c].slots[k].ofl) continue;
            hp_copy_stats cs;
            hp_offload_state_copy_stats(pp->chunks[c].slots[k].ofl, &cs);
            out->bytes_offloaded += (int64_t)(cs.bytes[HP_TIER_DEVICE][HP_TIER_HOST] + cs.bytes[HP_TIER_DEVICE][HP_TIER_DISK]);
            out->bytes_to_disk += (int64_t)cs.bytes[HP_TIER_DEVICE][HP_TIER_DISK];
            out->bytes_from_disk += (int64_t)cs.bytes[HP_TIER_DISK][HP_TIER_DEVICE];
        }
}

void hp_pipeline_reset_stats(hp_pipeline *pp) { memset(&pp->stats, 0, sizeof pp->stats); }

hp_status hp__pp_run_schedule(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, double *loss_out) {
    double t_start = hp_now_seconds();
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
    /* A failed action leaves the peers waiting for what this rank will not send, and this rank's
     * posted receives unmatched: tell every rank first (their waits, and so this rank's drain once
     * they stop, fail within a second instead of the timeout), keeping this rank's message. */
    char msg[1024] = "";
    if (st != HP_STATUS_OK) {
        snprintf(msg, sizeof msg, "%s", hp_error_message());
        hp_comm_report_failure(pp->comm, msg);
        hp__pp_post_after_failure(pp); /* the previous post-validated step settled as on every rank */
        hp_comm_give_up(pp->comm, msg);
    }
    for (int c = 0; c < pp->n_chunks; c++) /* every transfer done (a failed step drains them too) */
        for (int k = 0; k < pp->chunks[c].n_slots; k++) {
            pp_slot *sl = &pp->chunks[c].slots[k];
            hp_status w1 = hp__pp_reqs_wait(&sl->send_f), w2 = hp__pp_reqs_wait(&sl->send_b),
                      w3 = hp__pp_reqs_wait(&sl->recv);
            if (st == HP_STATUS_OK) st = w1 != HP_STATUS_OK ? w1 : w2 != HP_STATUS_OK ? w2 : w3;
        }
    if (msg[0]) hp__pp_post_drop(pp); /* a check whose all-reduce had not landed: given up (its update stays) */
    if (msg[0]) {
        /* The receives the drain abandoned are cancelled (and collectives of the stage's programs
         * given their second) before the pipeline's buffers can be freed: the communicators may
         * outlive it (pp->comm is the caller's). */
        hp_comm_release_abandoned(pp->comm);
        hp_comm_release_abandoned(pp->group_comm);
        hp_comm_release_abandoned(pp->stage_comm);
        hp_comm_release_abandoned(pp->tied_comm);
        return hp_error(st, "%s", msg);
    }
    HP_CHECK(st);
    pp->stats.step_seconds += hp_now_seconds() - t_start; /* the schedule, before the gradient reductions */
    pp->stats.steps++;
    /* only the last stage's ranks have a loss; model-parallel rank 0 counts it */
    *loss_out = pp->pi == 0 ? loss_sum / pp->m : 0.0;
    return HP_STATUS_OK;
}

hp_status hp_pipeline_forward_backward(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float *loss) {
    HP_CHECK(hp__pp_post_idle(pp));
    double part = 0;
    HP_CHECK(hp__pp_run_schedule(pp, tokens, targets, &part));
    HP_CHECK(hp__pp_reduce_gradients(pp));
    float mine = (float)part, total = 0;
    double t0 = hp_trace_begin(pp->trace);
    HP_CHECK(hp_comm_all_reduce(pp->comm, &mine, &total, 1, HP_DTYPE_F32, HP_REDUCE_SUM));
    if (pp->trace) trace_all_reduce(pp, 4, t0, sizeof(float));
    if (loss) *loss = total;
    return HP_STATUS_OK;
}

/* Zeroes every gradient accumulator (a skipped step). */
hp_status hp__pp_zero_accumulators(hp_pipeline *pp) {
    for (int i = 0; i < hp_store_n_entries(pp->store); i++) {
        const char *name = hp_store_name(pp->store, i);
        if (strncmp(name, "grad_acc.", 9)) continue;
        hp_store_entry_info e;
        HP_CHECK(hp_store_info(pp->store, name, &e));
        memset(hp_store_data(pp->store, name), 0, e.bytes);
        HP_CHECK(hp_store_touch(pp->store, name));
    }
    return HP_STATUS_OK;
}

hp_status hp__pp_local_sq(hp_pipeline *pp, float *sq) {
    double t0 = hp_now_seconds();
    HP_CHECK(hp_program_run(pp->norm_p));
    pp->stats.update_seconds += hp_now_seconds() - t0;
    *sq = *(const float *)hp_program_data(pp->norm_p, pp->norm_out);
    return HP_STATUS_OK;
}

hp_status hp__pp_apply_update(hp_pipeline *pp, float lr, float grad_sq) {
    double t0 = hp_now_seconds();
    pp->step++;
    float step_f = (float)pp->step;
    HP_CHECK(hp_program_set_input(pp->opt_p, pp->opt_lr, &lr, sizeof lr));
    HP_CHECK(hp_program_set_input(pp->opt_p, pp->opt_step, &step_f, sizeof step_f));
    HP_CHECK(hp_program_set_input(pp->opt_p, pp->opt_grad_sq, &grad_sq, sizeof grad_sq));
    HP_CHECK(hp_program_run(pp->opt_p));
    pp->stats.update_seconds += hp_now_seconds() - t0;
    return HP_STATUS_OK;
}

hp_status hp_pipeline_update(hp_pipeline *pp, float lr, float *grad_norm) {
    HP_CHECK(hp__pp_post_idle(pp));
    float mine = 0, grad_sq = 0;
    HP_CHECK(hp__pp_local_sq(pp, &mine));
    double t0 = hp_trace_begin(pp->trace);
    HP_CHECK(hp_comm_all_reduce(pp->comm, &mine, &grad_sq, 1, HP_DTYPE_F32, HP_REDUCE_SUM));
    if (pp->trace) trace_all_reduce(pp, 5, t0, sizeof(float));
    if (grad_norm) *grad_norm = sqrtf(grad_sq);
    if (!isfinite(grad_sq)) return hp__pp_zero_accumulators(pp); /* a NaN or Inf gradient: no update */
    return hp__pp_apply_update(pp, lr, grad_sq);
}

hp_status hp_pipeline_step(hp_pipeline *pp, const int32_t *tokens, const int32_t *targets, float lr, float *loss,
                           float *grad_norm) {
    float l = 0;
    HP_CHECK(hp_pipeline_forward_backward(pp, tokens, targets, &l));
    if (loss) *loss = l;
    if (!isfinite(l)) { /* a NaN or Inf loss: no update either */
        if (grad_norm) *grad_norm = NAN;
        return hp__pp_zero_accumulators(pp);
    }
    return hp_pipeline_update(pp, lr, grad_norm);
}
