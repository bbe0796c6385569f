/*
 * Schedule validation (shape, completeness, local order, deadlock, activation memory), the
 * discrete-event simulator and the theoretical bubble and peak-memory formulas.
 */
#include "mpmd/schedule_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double hp__sched_cost(const hp_sched_costs *c, const hp_sched_action *a) {
    int s = a->stage;
    switch (a->op) {
    case HP_SCHED_OP_F: return c->f_stage ? c->f_stage[s] : c->f;
    case HP_SCHED_OP_B: {
        double b = c->b_stage ? c->b_stage[s] : c->b;
        if (a->flags & HP_SCHED_FLAG_FULL_BACKWARD) b += c->w_stage ? c->w_stage[s] : c->w;
        return b;
    }
    case HP_SCHED_OP_W: return c->w_stage ? c->w_stage[s] : c->w;
    default: return 0.0;
    }
}

/* ---------------------------------------------------------------- event simulation */

/* Slot of the message a send or receive carries, indexed by the receiving stage: RECV_F(s) and
 * SEND_F(s-1) share slot F(s); RECV_B(s) and SEND_B(s+1) share slot B(s). */
static size_t msg_slot(const hp_schedule *s, const hp_sched_action *a) {
    size_t nm = (size_t)s->n_stages * s->m;
    switch (a->op) {
    case HP_SCHED_OP_SEND_F: return (size_t)(a->stage + 1) * s->m + a->mb;
    case HP_SCHED_OP_RECV_F: return (size_t)a->stage * s->m + a->mb;
    case HP_SCHED_OP_SEND_B: return nm + (size_t)(a->stage - 1) * s->m + a->mb;
    default: return nm + (size_t)a->stage * s->m + a->mb; /* RECV_B */
    }
}

/* True when b is the receive (or send) that matches the send (or receive) a. */
static bool matches(const hp_schedule *s, const hp_sched_action *a, const hp_sched_action *b) {
    bool a_send = a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_SEND_B;
    bool b_send = b->op == HP_SCHED_OP_SEND_F || b->op == HP_SCHED_OP_SEND_B;
    if (b->op < HP_SCHED_OP_SEND_F || a_send == b_send) return false;
    bool a_f = a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_RECV_F;
    bool b_f = b->op == HP_SCHED_OP_SEND_F || b->op == HP_SCHED_OP_RECV_F;
    return a_f == b_f && msg_slot(s, a) == msg_slot(s, b);
}

/* Appends "rank r blocks at action i (...), waiting for ..." to msg. */
static void describe_block(const hp_schedule *s, hp_sched_p2p mode, const int *ptr, int r, char *msg, size_t cap) {
    char a_s[96], w_s[96];
    const hp_sched_action *a = &s->actions[r][ptr[r]];
    hp__sched_action_str(a, a_s, sizeof a_s);
    size_t len = strlen(msg);
    if (len + 1 >= cap) return;
    bool send = a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_SEND_B;
    /* The matching action on the peer. */
    hp_sched_action want = *a;
    switch (a->op) {
    case HP_SCHED_OP_SEND_F: want.op = HP_SCHED_OP_RECV_F, want.stage = a->stage + 1; break;
    case HP_SCHED_OP_RECV_F: want.op = HP_SCHED_OP_SEND_F, want.stage = a->stage - 1; break;
    case HP_SCHED_OP_SEND_B: want.op = HP_SCHED_OP_RECV_B, want.stage = a->stage - 1; break;
    default: want.op = HP_SCHED_OP_SEND_B, want.stage = a->stage + 1; break;
    }
    want.peer = r;
    hp__sched_action_str(&want, w_s, sizeof w_s);
    int q = a->peer;
    const char *state;
    char state_buf[48];
    if (q < 0 || q >= s->p) {
        state = "which is out of range";
    } else if (ptr[q] >= s->n_actions[q]) {
        state = "which has finished its list without it";
    } else {
        snprintf(state_buf, sizeof state_buf, "blocked at its action %d", ptr[q]);
        state = state_buf;
    }
    snprintf(msg + len, cap - len, "%srank %d blocks at action %d (%s), waiting for rank %d's %s%s (%s)",
             len ? "; " : "", r, ptr[r], a_s, q, w_s,
             send && mode == HP_SCHED_P2P_RENDEZVOUS ? " to be reached" : "", state);
}

hp_status hp__sched_run(const hp_schedule *s, hp_sched_p2p mode, const hp_sched_costs *costs, double **start,
                        double **end) {
    int p = s->p;
    size_t nslots = (size_t)2 * s->n_stages * s->m;
    int *ptr = calloc((size_t)p, sizeof *ptr);
    double *clock = calloc((size_t)p, sizeof *clock);
    double *posted = malloc(nslots * sizeof *posted);
    if (!ptr || !clock || !posted) {
        free(ptr), free(clock), free(posted);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule simulation (%zu message slots)", nslots);
    }
    for (size_t i = 0; i < nslots; i++) posted[i] = -1.0;
    double lat = costs ? costs->p2p_latency : 0.0;
    bool progress = true;
    while (progress) {
        progress = false;
        for (int r = 0; r < p; r++) {
            while (ptr[r] < s->n_actions[r]) {
                int i = ptr[r];
                const hp_sched_action *a = &s->actions[r][i];
                double t0 = clock[r], t1;
                if (hp__sched_is_compute(a->op)) {
                    t1 = t0 + (costs ? hp__sched_cost(costs, a) : 0.0);
                } else if (mode == HP_SCHED_P2P_EAGER) {
                    size_t slot = msg_slot(s, a);
                    if (a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_SEND_B) {
                        posted[slot] = t0 + lat;
                        t1 = t0;
                    } else {
                        if (posted[slot] < 0) break; /* blocked */
                        t1 = posted[slot] > t0 ? posted[slot] : t0;
                    }
                } else {
                    /* Rendezvous: both sides must stand at the matching pair. */
                    int q = a->peer;
                    if (q < 0 || q >= p || ptr[q] >= s->n_actions[q] || !matches(s, a, &s->actions[q][ptr[q]])) break;
                    double t = clock[q] > t0 ? clock[q] : t0;
                    bool send = a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_SEND_B;
                    double tq = send ? t + lat : t; /* the peer's completion */
                    t1 = send ? t : t + lat;
                    if (start) start[q][ptr[q]] = clock[q];
                    if (end) end[q][ptr[q]] = tq;
                    clock[q] = tq;
                    ptr[q]++;
                }
                if (start) start[r][i] = t0;
                if (end) end[r][i] = t1;
                clock[r] = t1;
                ptr[r]++;
                progress = true;
            }
        }
    }
    hp_status st = HP_STATUS_OK;
    int blocked = 0;
    for (int r = 0; r < p; r++) blocked += ptr[r] < s->n_actions[r];
    if (blocked) {
        char msg[900] = "";
        int shown = 0;
        for (int r = 0; r < p && shown < 4; r++)
            if (ptr[r] < s->n_actions[r]) {
                describe_block(s, mode, ptr, r, msg, sizeof msg);
                shown++;
            }
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "deadlock (%d of %d ranks blocked, %s point-to-point): %s%s", blocked,
                      p, mode == HP_SCHED_P2P_EAGER ? "eager" : "rendezvous", msg, blocked > shown ? "; ..." : "");
    }
    free(ptr), free(clock), free(posted);
    return st;
}

/* ---------------------------------------------------------------- validation */

enum { POS_F, POS_B, POS_W, POS_SF, POS_RF, POS_SB, POS_RB, POS_N };

static hp_status check_shape(const hp_schedule *s) {
    if (s->p < 1 || s->m < 1 || s->n_stages < 1 || !s->stage_rank || !s->stage_chunk || !s->n_actions || !s->actions)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: p=%d, m=%d, n_stages=%d (each at least 1) or a NULL array",
                        s->p, s->m, s->n_stages);
    for (int st = 0; st < s->n_stages; st++) {
        int r = s->stage_rank[st], c = s->stage_chunk[st];
        if (r < 0 || r >= s->p)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: stage %d on rank %d, outside 0..%d", st, r, s->p - 1);
        if (c < 0 || c >= s->v)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: stage %d is chunk %d of rank %d, outside 0..%d", st,
                            c, r, s->v - 1);
        for (int t = 0; t < st; t++)
            if (s->stage_rank[t] == r && s->stage_chunk[t] == c)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: stages %d and %d are both chunk %d of rank %d", t,
                                st, c, r);
    }
    for (int r = 0; r < s->p; r++) {
        if (s->n_actions[r] < 0 || (s->n_actions[r] > 0 && !s->actions[r]))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: rank %d has %d actions", r, s->n_actions[r]);
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hp_sched_action *a = &s->actions[r][i];
            int st = a->stage;
            if (a->op >= HP_SCHED_OP_COUNT)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d: op %d is not an hp_sched_op", r, i,
                                (int)a->op);
            const char *opn = hp_sched_op_name((hp_sched_op)a->op);
            if (st < 0 || st >= s->n_stages || s->stage_rank[st] != r)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s): stage %d is %s", r, i, opn, st,
                                st < 0 || st >= s->n_stages ? "out of range" : "held by another rank");
            if (a->chunk != s->stage_chunk[st])
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s stage %d): chunk %d, expected %d", r, i,
                                opn, st, (int)a->chunk, s->stage_chunk[st]);
            if (a->mb < 0 || a->mb >= s->m)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s stage %d): micro-batch %d outside 0..%d",
                                r, i, opn, st, (int)a->mb, s->m - 1);
            if ((a->flags & HP_SCHED_FLAG_FULL_BACKWARD) && a->op != HP_SCHED_OP_B)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s): the full-backward flag is for B only",
                                r, i, opn);
            if (a->flags & ~(HP_SCHED_FLAG_FULL_BACKWARD | HP_SCHED_FLAG_OVERLAP))
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s): unknown flags 0x%x", r, i, opn,
                                (unsigned)a->flags);
            if (a->flags & HP_SCHED_FLAG_OVERLAP) {
                int j = i + 1;
                while (j < s->n_actions[r] && !hp__sched_is_compute(s->actions[r][j].op)) j++;
                if (a->op != HP_SCHED_OP_F || j == s->n_actions[r] || s->actions[r][j].op != HP_SCHED_OP_B)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT,
                                    "rank %d action %d (%s stage %d mb %d): the overlap flag needs an F whose next "
                                    "compute action is a B",
                                    r, i, opn, st, (int)a->mb);
            }
            if (!hp__sched_is_compute(a->op)) {
                bool to_next = a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_RECV_B;
                int nb = to_next ? st + 1 : st - 1;
                if (nb < 0 || nb >= s->n_stages)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s stage %d): there is no stage %d", r,
                                    i, opn, st, nb);
                int q = s->stage_rank[nb];
                if (q == r)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT,
                                    "rank %d action %d (%s stage %d): stage %d is on the same rank (a local hand-over, "
                                    "no message)",
                                    r, i, opn, st, nb);
                if (a->peer != q)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT,
                                    "rank %d action %d (%s stage %d mb %d): peer %d, but stage %d is on rank %d", r, i,
                                    opn, st, (int)a->mb, (int)a->peer, nb, q);
            }
        }
    }
    return HP_STATUS_OK;
}

/* The position of each (kind, stage, mb) in its rank's list, rejecting duplicates. */
static hp_status fill_positions(const hp_schedule *s, int32_t *pos) {
    size_t nm = (size_t)s->n_stages * s->m;
    static const int kind_of[HP_SCHED_OP_COUNT] = {POS_F, POS_B, POS_W, POS_SF, POS_RF, POS_SB, POS_RB};
    for (size_t i = 0; i < POS_N * nm; i++) pos[i] = -1;
    for (int r = 0; r < s->p; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hp_sched_action *a = &s->actions[r][i];
            int32_t *slot = &pos[kind_of[a->op] * nm + (size_t)a->stage * s->m + a->mb];
            if (*slot >= 0) {
                char buf[96];
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (%s) repeats action %d", r, i,
                                hp__sched_action_str(a, buf, sizeof buf), (int)*slot);
            }
            *slot = i;
        }
    return HP_STATUS_OK;
}

static hp_status check_complete_and_ordered(const hp_schedule *s, const int32_t *pos) {
    size_t nm = (size_t)s->n_stages * s->m;
#define P(kind, st, mb) pos[(kind) * nm + (size_t)(st) * s->m + (mb)]
    for (int st = 0; st < s->n_stages; st++) {
        int r = s->stage_rank[st];
        bool prev_remote = st > 0 && s->stage_rank[st - 1] != r;
        bool next_remote = st + 1 < s->n_stages && s->stage_rank[st + 1] != r;
        for (int mb = 0; mb < s->m; mb++) {
            int f = P(POS_F, st, mb), b = P(POS_B, st, mb), w = P(POS_W, st, mb);
            if (f < 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "stage %d (rank %d, chunk %d) micro-batch %d has no F", st, r,
                                s->stage_chunk[st], mb);
            if (b < 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "stage %d (rank %d, chunk %d) micro-batch %d has no B", st, r,
                                s->stage_chunk[st], mb);
            bool full = s->actions[r][b].flags & HP_SCHED_FLAG_FULL_BACKWARD;
            if (full && w >= 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT,
                                "rank %d action %d (W stage %d mb %d): its B (action %d) is a full backward", r, w, st, mb,
                                b);
            if (!full && w < 0)
                return hp_error(HP_STATUS_INVALID_ARGUMENT,
                                "stage %d (rank %d) micro-batch %d has a split B (action %d) and no W", st, r, mb, b);
            /* Sends and receives exactly where a remote hand-over needs them. */
            const struct { int kind; bool need; const char *what; } comm[4] = {
                {POS_RF, prev_remote, "RECV_F"}, {POS_SF, next_remote, "SEND_F"},
                {POS_RB, next_remote, "RECV_B"}, {POS_SB, prev_remote, "SEND_B"}};
            for (int k = 0; k < 4; k++)
                if (comm[k].need && P(comm[k].kind, st, mb) < 0)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d has no %s of stage %d micro-batch %d (stage %d is on rank %d)",
                                    r, comm[k].what, st, mb, k == 0 || k == 3 ? st - 1 : st + 1,
                                    s->stage_rank[k == 0 || k == 3 ? st - 1 : st + 1]);
            /* Local order. */
            int before = -1;
            const char *need = NULL;
            if (st > 0) {
                before = prev_remote ? P(POS_RF, st, mb) : P(POS_F, st - 1, mb);
                need = prev_remote ? "its RECV_F" : "F of the previous stage";
                if (before > f)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (F stage %d mb %d) comes before %s (action %d)",
                                    r, f, st, mb, need, before);
            }
            if (b < f)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (B stage %d mb %d) comes before its F (action %d)",
                                r, b, st, mb, f);
            if (st + 1 < s->n_stages) {
                before = next_remote ? P(POS_RB, st, mb) : P(POS_B, st + 1, mb);
                need = next_remote ? "its RECV_B" : "B of the next stage";
                if (before > b)
                    return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (B stage %d mb %d) comes before %s (action %d)",
                                    r, b, st, mb, need, before);
            }
            if (w >= 0 && w < b)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (W stage %d mb %d) comes before its B (action %d)",
                                r, w, st, mb, b);
            int sf = P(POS_SF, st, mb), sb = P(POS_SB, st, mb);
            if (sf >= 0 && sf < f)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (SEND_F stage %d mb %d) comes before its F (action %d)",
                                r, sf, st, mb, f);
            if (sb >= 0 && sb < b)
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "rank %d action %d (SEND_B stage %d mb %d) comes before its B (action %d)",
                                r, sb, st, mb, b);
        }
    }
#undef P
    return HP_STATUS_OK;
}

static hp_status check_memory(const hp_schedule *s, const hp_sched_check_opts *o, int *peak_inflight,
                              double *peak_bytes) {
    hp_status st = HP_STATUS_OK;
    for (int r = 0; r < s->p; r++) {
        int cnt = 0, peak = 0, peak_at = -1, bpeak_at = -1;
        double bytes = 0.0, bpeak = 0.0;
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hp_sched_action *a = &s->actions[r][i];
            double ab = o->act_bytes ? o->act_bytes[a->stage] : 0.0;
            if (a->op == HP_SCHED_OP_F) {
                cnt++;
                bytes += ab;
            } else if (a->op == HP_SCHED_OP_B) {
                bool full = a->flags & HP_SCHED_FLAG_FULL_BACKWARD;
                cnt -= full;
                bytes -= full ? ab : ab * (1.0 - o->w_fraction);
            } else if (a->op == HP_SCHED_OP_W) {
                cnt--;
                bytes -= ab * o->w_fraction;
            }
            if (cnt > peak) peak = cnt, peak_at = i;
            if (bytes > bpeak) bpeak = bytes, bpeak_at = i;
        }
        if (peak_inflight) peak_inflight[r] = peak;
        if (peak_bytes) peak_bytes[r] = bpeak;
        char buf[96];
        if (st == HP_STATUS_OK && o->max_inflight > 0 && peak > o->max_inflight)
            st = hp_error(HP_STATUS_OUT_OF_MEMORY,
                          "rank %d holds %d micro-batch activations in flight after action %d (%s), over the budget of %d",
                          r, peak, peak_at, hp__sched_action_str(&s->actions[r][peak_at], buf, sizeof buf), o->max_inflight);
        double cap = o->max_bytes_rank ? o->max_bytes_rank[r] : o->max_bytes;
        if (st == HP_STATUS_OK && o->act_bytes && cap > 0 && bpeak > cap)
            st = hp_error(HP_STATUS_OUT_OF_MEMORY,
                          "rank %d holds %.10g bytes of activations after action %d (%s), over its budget of %.10g bytes", r,
                          bpeak, bpeak_at, hp__sched_action_str(&s->actions[r][bpeak_at], buf, sizeof buf), cap);
    }
    return st;
}

hp_status hp_schedule_validate(const hp_schedule *s, const hp_sched_check_opts *opts, int *peak_inflight,
                               double *peak_bytes) {
    if (!s) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_validate: NULL schedule");
    hp_sched_check_opts o = HP_SCHED_CHECK_OPTS_INIT;
    if (opts) o = *opts;
    if (o.p2p != HP_SCHED_P2P_EAGER && o.p2p != HP_SCHED_P2P_RENDEZVOUS)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_validate: p2p mode %d", (int)o.p2p);
    if (!(o.w_fraction >= 0.0 && o.w_fraction <= 1.0))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_validate: w_fraction %g outside [0, 1]", o.w_fraction);
    if (o.max_inflight < 0)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_validate: max_inflight %d is negative", o.max_inflight);
    HP_CHECK(check_shape(s));
    if (o.act_bytes)
        for (int st = 0; st < s->n_stages; st++)
            if (!(o.act_bytes[st] >= 0.0) || !isfinite(o.act_bytes[st]))
                return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_validate: act_bytes[%d] = %g", st, o.act_bytes[st]);
    size_t n = (size_t)POS_N * s->n_stages * s->m;
    int32_t *pos = malloc(n * sizeof *pos);
    if (!pos) return hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule validation (%zu positions)", n);
    hp_status st = fill_positions(s, pos);
    if (st == HP_STATUS_OK) st = check_complete_and_ordered(s, pos);
    free(pos);
    HP_CHECK(st);
    HP_CHECK(hp__sched_run(s, o.p2p, NULL, NULL, NULL));
    return check_memory(s, &o, peak_inflight, peak_bytes);
}

/* ---------------------------------------------------------------- simulation */

void hp_sched_timeline_free(hp_sched_timeline *tl) {
    if (!tl) return;
    if (tl->start)
        for (int r = 0; r < tl->p; r++) free(tl->start[r]);
    if (tl->end)
        for (int r = 0; r < tl->p; r++) free(tl->end[r]);
    free(tl->start), free(tl->end), free(tl->n_actions), free(tl->busy), free(tl->first_start), free(tl->last_end);
    memset(tl, 0, sizeof *tl);
}

static hp_status check_time(const char *what, int i, double t) {
    if (!isfinite(t) || t < 0.0)
        return i < 0 ? hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule costs: %s = %g seconds", what, t)
                     : hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule costs: %s[%d] = %g seconds", what, i, t);
    return HP_STATUS_OK;
}

hp_status hp_schedule_simulate(const hp_schedule *s, const hp_sched_costs *costs, hp_sched_timeline *out) {
    if (!s || !out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_simulate: NULL argument");
    memset(out, 0, sizeof *out);
    hp_sched_costs c = HP_SCHED_COSTS_INIT;
    if (costs) c = *costs;
    HP_CHECK(check_time("f", -1, c.f));
    HP_CHECK(check_time("b", -1, c.b));
    HP_CHECK(check_time("w", -1, c.w));
    HP_CHECK(check_time("p2p_latency", -1, c.p2p_latency));
    for (int st = 0; st < s->n_stages; st++) {
        if (c.f_stage) HP_CHECK(check_time("f_stage", st, c.f_stage[st]));
        if (c.b_stage) HP_CHECK(check_time("b_stage", st, c.b_stage[st]));
        if (c.w_stage) HP_CHECK(check_time("w_stage", st, c.w_stage[st]));
    }
    HP_CHECK(check_shape(s));
    int p = s->p;
    out->p = p;
    out->n_actions = malloc((size_t)p * sizeof *out->n_actions);
    out->start = calloc((size_t)p, sizeof *out->start);
    out->end = calloc((size_t)p, sizeof *out->end);
    out->busy = calloc((size_t)p, sizeof *out->busy);
    out->first_start = calloc((size_t)p, sizeof *out->first_start);
    out->last_end = calloc((size_t)p, sizeof *out->last_end);
    hp_status st = HP_STATUS_OK;
    if (!out->n_actions || !out->start || !out->end || !out->busy || !out->first_start || !out->last_end) goto oom;
    for (int r = 0; r < p; r++) {
        out->n_actions[r] = s->n_actions[r];
        size_t n = (size_t)s->n_actions[r] + 1;
        out->start[r] = malloc(n * sizeof(double));
        out->end[r] = malloc(n * sizeof(double));
        if (!out->start[r] || !out->end[r]) goto oom;
    }
    st = hp__sched_run(s, HP_SCHED_P2P_EAGER, &c, out->start, out->end);
    if (st != HP_STATUS_OK) goto fail;
    double busy = 0.0, span = 0.0;
    out->step_time = 0.0;
    for (int r = 0; r < p; r++) {
        bool any = false;
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hp_sched_action *a = &s->actions[r][i];
            if (hp__sched_is_compute(a->op)) {
                out->busy[r] += out->end[r][i] - out->start[r][i];
                if (!any) out->first_start[r] = out->start[r][i];
                any = true;
            }
            if (out->end[r][i] > out->last_end[r]) out->last_end[r] = out->end[r][i];
        }
        if (out->last_end[r] > out->step_time) out->step_time = out->last_end[r];
        if (out->last_end[r] - out->first_start[r] > span) span = out->last_end[r] - out->first_start[r];
        busy += out->busy[r];
    }
    out->bubble = out->step_time > 0 ? 1.0 - busy / (p * out->step_time) : 0.0;
    out->bubble_span = span > 0 ? 1.0 - busy / (p * span) : 0.0;
    return HP_STATUS_OK;
oom:
    st = hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule timeline of %d ranks", p);
fail:
    hp_sched_timeline_free(out);
    return st;
}

/* ---------------------------------------------------------------- formulas */

hp_sched_bubble hp_schedule_bubble_formula(hp_sched_kind kind, int p, int m, int v, double f, double b, double w) {
    hp_sched_bubble out = {NAN, NAN};
    if (p < 1 || m < 1 || v < 0 || !(f >= 0) || !(b >= 0) || !(w >= 0)) return out;
    double tc, tb_sync, tb_span;
    switch (kind) {
    case HP_SCHED_KIND_GPIPE:
    case HP_SCHED_KIND_1F1B:
    case HP_SCHED_KIND_INTERLEAVED_1F1B:
        if (kind != HP_SCHED_KIND_INTERLEAVED_1F1B) v = 1;
        else if (v == 0) v = 2;
        tc = (double)v * m * (f + b + w);
        /* A round of m < p micro-batches leaves each chunk hand-over from the last rank back to
         * rank 0 waiting p - m slots. */
        tb_sync = tb_span = (p - 1 + (double)(v - 1) * (m < p ? p - m : 0)) * (f + b + w);
        break;
    case HP_SCHED_KIND_ZB_H1:
        tc = m * (f + b + w);
        tb_sync = tb_span = (p - 1) * fmax(f + b - w, fmax(f, b));
        break;
    case HP_SCHED_KIND_ZB_V:
        tc = 2.0 * m * (f + b + w);
        tb_span = (p - 1) * fmax(f + b - 2 * w, 0.0);
        tb_sync = (p - 1) * fmax(f + b - 2 * w, f);
        break;
    case HP_SCHED_KIND_DUALPIPE_V:
        tc = 2.0 * m * (f + b + w);
        tb_sync = tb_span = (p - 1) * fmax(f + b - w, f);
        break;
    default: return out;
    }
    out.sync = tc + tb_sync > 0 ? tb_sync / (tc + tb_sync) : 0.0;
    out.span = tc + tb_span > 0 ? tb_span / (tc + tb_span) : 0.0;
    return out;
}

static int imin3(int a, int b, int c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

int hp_schedule_peak_formula(hp_sched_kind kind, int p, int m, int v, int r) {
    if (p < 1 || m < 1 || v < 0 || r < 0 || r >= p) return -1;
    switch (kind) {
    case HP_SCHED_KIND_GPIPE: return m;
    case HP_SCHED_KIND_1F1B: return p - r < m ? p - r : m;
    case HP_SCHED_KIND_INTERLEAVED_1F1B: {
        if (v == 0) v = 2;
        int rounds = m / p > 1 ? m / p : 1, g = m / rounds + (m % rounds > 0);
        int k = (v - 1) * g + 2 * (p - 1 - r) + 1;
        return k < v * m ? k : v * m;
    }
    case HP_SCHED_KIND_ZB_H1: return p < m ? p : m;
    case HP_SCHED_KIND_ZB_V: return imin3(m + 1 + r, 2 * m, 2 * p);
    case HP_SCHED_KIND_DUALPIPE_V: return imin3(m + 1 + r, 2 * m, 2 * p + 1);
    default: return -1;
    }
}
