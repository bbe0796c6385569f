/* Pipeline schedules: names, the schedule struct, per-rank lists and the insertion of sends and
 * receives. The generators are in schedule_gen.c, the validator and simulator in schedule_check.c,
 * the text table in schedule_text.c. */
#include "mpmd/schedule_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const KIND_NAMES[HP_SCHED_KIND_COUNT] = {
    [HP_SCHED_KIND_GPIPE] = "gpipe",       [HP_SCHED_KIND_1F1B] = "1f1b",
    [HP_SCHED_KIND_INTERLEAVED_1F1B] = "interleaved-1f1b", [HP_SCHED_KIND_ZB_H1] = "zb-h1",
    [HP_SCHED_KIND_ZB_V] = "zb-v",         [HP_SCHED_KIND_DUALPIPE_V] = "dualpipe-v",
    [HP_SCHED_KIND_USER] = "user",
};

const char *hp_sched_kind_name(hp_sched_kind kind) {
    if ((int)kind < 0 || kind >= HP_SCHED_KIND_COUNT) return "?";
    return KIND_NAMES[kind];
}

hp_status hp_sched_kind_parse(const char *name, hp_sched_kind *out) {
    if (!name || !out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_sched_kind_parse: NULL argument");
    for (int k = 0; k < HP_SCHED_KIND_COUNT; k++)
        if (strcasecmp(name, KIND_NAMES[k]) == 0) {
            *out = (hp_sched_kind)k;
            return HP_STATUS_OK;
        }
    static const struct {
        const char *name;
        hp_sched_kind kind;
    } CONFIG_NAMES[] = {{"interleaved", HP_SCHED_KIND_INTERLEAVED_1F1B}, {"dualpipev", HP_SCHED_KIND_DUALPIPE_V}};
    for (size_t k = 0; k < sizeof CONFIG_NAMES / sizeof CONFIG_NAMES[0]; k++)
        if (strcasecmp(name, CONFIG_NAMES[k].name) == 0) {
            *out = CONFIG_NAMES[k].kind;
            return HP_STATUS_OK;
        }
    return hp_error(HP_STATUS_INVALID_ARGUMENT,
                    "unknown pipeline schedule '%s' (expected gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, "
                    "dualpipe-v or user)",
                    name);
}

const char *hp_sched_op_name(hp_sched_op op) {
    static const char *const names[HP_SCHED_OP_COUNT] = {"F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
    if ((int)op < 0 || op >= HP_SCHED_OP_COUNT) return "?";
    return names[op];
}

const char *hp__sched_action_str(const hp_sched_action *a, char *buf, size_t n) {
    const char *op = a->op == HP_SCHED_OP_B && (a->flags & HP_SCHED_FLAG_FULL_BACKWARD)
                         ? "B (full)"
                         : hp_sched_op_name((hp_sched_op)a->op);
    if (a->op == HP_SCHED_OP_SEND_F || a->op == HP_SCHED_OP_SEND_B)
        snprintf(buf, n, "%s stage %d mb %d to rank %d", op, (int)a->stage, (int)a->mb, (int)a->peer);
    else if (a->op == HP_SCHED_OP_RECV_F || a->op == HP_SCHED_OP_RECV_B)
        snprintf(buf, n, "%s stage %d mb %d from rank %d", op, (int)a->stage, (int)a->mb, (int)a->peer);
    else
        snprintf(buf, n, "%s stage %d mb %d", op, (int)a->stage, (int)a->mb);
    return buf;
}

/* ---------------------------------------------------------------- per-rank lists */

hp_status hp__sched_lists_init(hp__sched_lists *l, int p) {
    memset(l, 0, sizeof *l);
    l->p = p;
    l->a = calloc((size_t)p, sizeof *l->a);
    l->n = calloc((size_t)p, sizeof *l->n);
    l->cap = calloc((size_t)p, sizeof *l->cap);
    if (!l->a || !l->n || !l->cap) {
        hp__sched_lists_free(l);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule lists for %d ranks", p);
    }
    return HP_STATUS_OK;
}

void hp__sched_lists_free(hp__sched_lists *l) {
    if (!l) return;
    if (l->a)
        for (int r = 0; r < l->p; r++) free(l->a[r]);
    free(l->a);
    free(l->n);
    free(l->cap);
    memset(l, 0, sizeof *l);
}

void hp__sched_push(hp__sched_lists *l, int r, hp_sched_op op, int stage, int mb, unsigned flags) {
    if (l->st != HP_STATUS_OK) return;
    HP_ASSERT(r >= 0 && r < l->p);
    if (l->n[r] == l->cap[r]) {
        int cap = l->cap[r] ? 2 * l->cap[r] : 64;
        hp_sched_action *a = realloc(l->a[r], (size_t)cap * sizeof *a);
        if (!a) {
            l->st = hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule list of rank %d (%d actions)", r, cap);
            return;
        }
        l->a[r] = a;
        l->cap[r] = cap;
    }
    l->a[r][l->n[r]++] = (hp_sched_action){.op = (uint8_t)op, .flags = (uint8_t)flags, .chunk = 0,
                                            .stage = stage, .mb = mb, .peer = -1};
}

void hp__sched_lists_truncate(hp__sched_lists *l, int m) {
    for (int r = 0; r < l->p; r++) {
        hp_sched_action *a = l->a[r];
        int k = 0;
        for (int i = 0; i < l->n[r]; i++) {
            if (a[i].mb >= m) {
                /* The F of an overlapped pair whose B goes is an ordinary F. */
                if (k > 0 && (a[k - 1].flags & HP_SCHED_FLAG_OVERLAP)) a[k - 1].flags &= (uint8_t)~HP_SCHED_FLAG_OVERLAP;
                continue;
            }
            a[k++] = a[i];
        }
        l->n[r] = k;
        /* An overlap F is followed by its partner; one left last (its partner dropped) is plain. */
        for (int i = 0; i < k; i++)
            if ((a[i].flags & HP_SCHED_FLAG_OVERLAP) && (i + 1 == k || a[i + 1].op != HP_SCHED_OP_B))
                a[i].flags &= (uint8_t)~HP_SCHED_FLAG_OVERLAP;
    }
}

void hp__sched_place_loop(int p, int v, int *map) {
    for (int s = 0; s < p * v; s++) map[s] = s % p;
}

void hp__sched_place_v(int p, int *map) {
    for (int s = 0; s < 2 * p; s++) map[s] = s < p ? s : 2 * p - 1 - s;
}

/* ---------------------------------------------------------------- schedule struct */

void hp_schedule_free(hp_schedule *s) {
    if (!s) return;
    if (s->actions)
        for (int r = 0; r < s->p; r++) free(s->actions[r]);
    free(s->actions);
    free(s->n_actions);
    free(s->stage_rank);
    free(s->stage_chunk);
    memset(s, 0, sizeof *s);
}

int hp_schedule_count_compute(const hp_schedule *s, int r) {
    int n = 0;
    for (int q = r < 0 ? 0 : r; q < (r < 0 ? s->p : r + 1); q++)
        for (int i = 0; i < s->n_actions[q]; i++) n += hp__sched_is_compute(s->actions[q][i].op);
    return n;
}

hp_status hp_schedule_from_compute(hp_sched_kind kind, int p, int m, int n_stages, const int *stage_rank,
                                   const hp_sched_action *const *compute, const int *n_compute,
                                   hp_schedule *out) {
    if (!out || !stage_rank || !compute || !n_compute)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_from_compute: NULL argument");
    memset(out, 0, sizeof *out);
    if (p < 1 || m < 1 || n_stages < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: p=%d, m=%d and n_stages=%d must be at least 1", p, m,
                        n_stages);
    hp_status st = HP_STATUS_OK;
    int *held = calloc((size_t)p, sizeof *held);
    out->kind = kind;
    out->p = p;
    out->m = m;
    out->n_stages = n_stages;
    out->stage_rank = malloc((size_t)n_stages * sizeof *out->stage_rank);
    out->stage_chunk = malloc((size_t)n_stages * sizeof *out->stage_chunk);
    out->n_actions = calloc((size_t)p, sizeof *out->n_actions);
    out->actions = calloc((size_t)p, sizeof *out->actions);
    if (!held || !out->stage_rank || !out->stage_chunk || !out->n_actions || !out->actions) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule of %d ranks and %d stages", p, n_stages);
        goto fail;
    }
    for (int s = 0; s < n_stages; s++) {
        if (stage_rank[s] < 0 || stage_rank[s] >= p) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: stage %d is placed on rank %d, outside 0..%d", s,
                          stage_rank[s], p - 1);
            goto fail;
        }
        out->stage_rank[s] = stage_rank[s];
        out->stage_chunk[s] = held[stage_rank[s]]++;
    }
    for (int r = 0; r < p; r++) {
        if (held[r] == 0) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: rank %d holds no stage (n_stages=%d, p=%d)", r,
                          n_stages, p);
            goto fail;
        }
        if (held[r] > out->v) out->v = held[r];
    }
    for (int r = 0; r < p; r++) {
        int n = n_compute[r], k = 0;
        if (n < 0) {
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: rank %d has %d actions", r, n);
            goto fail;
        }
        /* At most two sends/receives per compute action. */
        out->actions[r] = malloc(((size_t)n * 3 + 1) * sizeof *out->actions[r]);
        if (!out->actions[r]) {
            st = hp_error(HP_STATUS_OUT_OF_MEMORY, "schedule list of rank %d (%d actions)", r, 3 * n);
            goto fail;
        }
        hp_sched_action *dst = out->actions[r];
        for (int i = 0; i < n; i++) {
            hp_sched_action a = compute[r][i];
            if (!hp__sched_is_compute(a.op)) {
                st = hp_error(HP_STATUS_INVALID_ARGUMENT,
                              "schedule: rank %d action %d has op %d; only F, B and W are given (sends and "
                              "receives are inserted)",
                              r, i, (int)a.op);
                goto fail;
            }
            if (a.stage < 0 || a.stage >= n_stages || stage_rank[a.stage] != r) {
                st = hp_error(HP_STATUS_INVALID_ARGUMENT, "schedule: rank %d action %d names stage %d, %s", r, i,
                              (int)a.stage,
                              a.stage < 0 || a.stage >= n_stages ? "outside the stages" : "held by another rank");
                goto fail;
            }
            a.chunk = (int16_t)out->stage_chunk[a.stage];
            a.peer = -1;
            int s = a.stage;
            bool fwd = a.op == HP_SCHED_OP_F, bwd = a.op == HP_SCHED_OP_B;
            int prev = s > 0 ? stage_rank[s - 1] : r, next = s + 1 < n_stages ? stage_rank[s + 1] : r;
            if (fwd && prev != r)
                dst[k++] = (hp_sched_action){HP_SCHED_OP_RECV_F, 0, a.chunk, s, a.mb, prev};
            if (bwd && next != r)
                dst[k++] = (hp_sched_action){HP_SCHED_OP_RECV_B, 0, a.chunk, s, a.mb, next};
            dst[k++] = a;
            if (fwd && next != r)
                dst[k++] = (hp_sched_action){HP_SCHED_OP_SEND_F, 0, a.chunk, s, a.mb, next};
            if (bwd && prev != r)
                dst[k++] = (hp_sched_action){HP_SCHED_OP_SEND_B, 0, a.chunk, s, a.mb, prev};
            if (a.op == HP_SCHED_OP_B && !(a.flags & HP_SCHED_FLAG_FULL_BACKWARD)) out->split_backward = true;
        }
        out->n_actions[r] = k;
    }
    free(held);
    return HP_STATUS_OK;
fail:
    free(held);
    hp_schedule_free(out);
    return st;
}

hp_status hp_schedule_build(hp_sched_kind kind, int p, int m, int v, hp_schedule *out) {
    if (!out) return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_schedule_build: NULL output");
    memset(out, 0, sizeof *out);
    if ((int)kind < 0 || kind >= HP_SCHED_KIND_USER)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "hp_schedule_build: kind %d is not a built-in schedule (a user schedule is parsed)", (int)kind);
    const char *name = hp_sched_kind_name(kind);
    if (p < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s schedule: p=%d ranks, need at least 1", name, p);
    if (m < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s schedule: m=%d micro-batches, need at least 1", name, m);
    if (v < 0) return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s schedule: v=%d chunks per rank is negative", name, v);
    bool vshape = kind == HP_SCHED_KIND_ZB_V || kind == HP_SCHED_KIND_DUALPIPE_V;
    if (v == 0) v = kind == HP_SCHED_KIND_INTERLEAVED_1F1B || vshape ? 2 : 1;
    if (vshape && v != 2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "%s schedule: v=%d chunks per rank; the V placement holds exactly 2 (stage r and 2p-1-r)",
                        name, v);
    if (kind != HP_SCHED_KIND_INTERLEAVED_1F1B && !vshape && v != 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT,
                        "%s schedule: v=%d chunks per rank; it runs one stage per rank (use interleaved-1f1b for "
                        "v > 1)",
                        name, v);
    if ((int64_t)p * v * m > ((int64_t)1 << 26))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "%s schedule: p*v*m = %d*%d*%d is above 2^26 actions", name, p, v,
                        m);

    hp__sched_lists l;
    HP_CHECK(hp__sched_lists_init(&l, p));
    int n_stages = p * v;
    int *map = malloc((size_t)n_stages * sizeof *map);
    if (!map) {
        hp__sched_lists_free(&l);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "stage map of %d stages", n_stages);
    }
    if (vshape)
        hp__sched_place_v(p, map);
    else
        hp__sched_place_loop(p, v, map);
    switch (kind) {
    case HP_SCHED_KIND_GPIPE: hp__sched_gen_gpipe(&l, p, m); break;
    case HP_SCHED_KIND_1F1B: hp__sched_gen_1f1b(&l, p, m); break;
    case HP_SCHED_KIND_INTERLEAVED_1F1B: hp__sched_gen_interleaved(&l, p, m, v); break;
    case HP_SCHED_KIND_ZB_H1: hp__sched_gen_zb_h1(&l, p, m); break;
    case HP_SCHED_KIND_ZB_V: hp__sched_gen_zb_v(&l, p, m); break;
    case HP_SCHED_KIND_DUALPIPE_V: hp__sched_gen_dualpipe_v(&l, p, m); break;
    default: HP_ASSERT(!"unreachable");
    }
    hp_status st = l.st;
    if (st == HP_STATUS_OK)
        st = hp_schedule_from_compute(kind, p, m, n_stages, map, (const hp_sched_action *const *)l.a, l.n, out);
    free(map);
    hp__sched_lists_free(&l);
    if (st != HP_STATUS_OK) return hp_error_prefix(st, "%s schedule (p=%d m=%d v=%d): ", name, p, m, v);
    return HP_STATUS_OK;
}
