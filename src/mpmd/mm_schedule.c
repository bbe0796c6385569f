/*
 * The multimodal model's dynamic scheduler (hp/multimodal.h, hp_mm_schedule_make): a list scheduler
 * over the passes of one step on the three groups (encoder a, encoder b, decoder), fed with the
 * passes' measured times. Each group runs its passes one at a time; whenever a group is free it
 * takes a ready pass, backward before forward, forwards limited to `inflight` micro-batches ahead of
 * the backwards (the activations held). CONCURRENT searches the encoders' limits for the smallest
 * predicted makespan; CHAIN is the linear pipeline's 1F1B (limits p - stage: 3, 2, 1).
 */
#include "hp/multimodal.h"

#include <math.h>
#include <string.h>

#define MAXM 64

typedef struct sim {
    int m;
    hp_mm_mode mode;
    const double *tf, *tb;
    double link;
    double fF[HP_MM_ROLES][MAXM], fB[HP_MM_ROLES][MAXM]; /* finish times; < 0: not scheduled */
    int nF[HP_MM_ROLES], nB[HP_MM_ROLES];                /* passes scheduled so far */
    double tfree[HP_MM_ROLES];
} sim;

/* The earliest start of role r's next forward (-1: its inputs are not scheduled yet or no slot). */
static double ready_f(const sim *s, int r, const int *inflight) {
    int i = s->nF[r];
    if (i >= s->m) return -1;
    if (r < HP_MM_ROLE_DEC && i - s->nB[r] >= inflight[r]) return -1;
    double t = s->tfree[r];
    if (r == HP_MM_ROLE_DEC) {
        int from[2] = {HP_MM_ROLE_ENC_A, HP_MM_ROLE_ENC_B};
        int nfrom = s->mode == HP_MM_MODE_CHAIN ? 1 : 2;
        if (s->mode == HP_MM_MODE_CHAIN) from[0] = HP_MM_ROLE_ENC_B;
        for (int k = 0; k < nfrom; k++) {
            if (s->fF[from[k]][i] < 0) return -1;
            t = fmax(t, s->fF[from[k]][i] + s->link);
        }
    } else if (r == HP_MM_ROLE_ENC_B && s->mode == HP_MM_MODE_CHAIN) {
        if (s->fF[HP_MM_ROLE_ENC_A][i] < 0) return -1;
        t = fmax(t, s->fF[HP_MM_ROLE_ENC_A][i] + s->link);
    }
    return t;
}

/* The earliest start of encoder r's next backward (-1: not ready to be scheduled). */
static double ready_b(const sim *s, int r) {
    int i = s->nB[r];
    if (r == HP_MM_ROLE_DEC || i >= s->m || i >= s->nF[r]) return -1;
    double dep = s->fF[HP_MM_ROLE_DEC][i];
    if (s->mode == HP_MM_MODE_CHAIN && r == HP_MM_ROLE_ENC_A) dep = s->fB[HP_MM_ROLE_ENC_B][i];
    if (dep < 0) return -1;
    return fmax(s->tfree[r], dep + s->link);
}

/* Runs the list scheduler with the given limits; fills out (when not NULL) and returns the makespan,
 * or -1 when it stalls (which a valid limit never does). */
static double simulate(sim *s, const int *inflight, hp_mm_schedule *out) {
    for (int r = 0; r < HP_MM_ROLES; r++) {
        s->nF[r] = s->nB[r] = 0;
        s->tfree[r] = 0;
        for (int i = 0; i < s->m; i++) s->fF[r][i] = s->fB[r][i] = -1;
        if (out) out->n_ops[r] = 0;
    }
    int total = 2 * s->m * 2 + s->m, done = 0;
    double end = 0;
    while (done < total) {
        int best_r = -1;
        bool best_back = false;
        double best_t = INFINITY;
        for (int r = 0; r < HP_MM_ROLES; r++) {
            double tb = ready_b(s, r), tf = ready_f(s, r, inflight);
            bool back = tb >= 0 && (tf < 0 || tb <= tf);
            double t = back ? tb : tf;
            if (t < 0) continue;
            if (t < best_t) best_t = t, best_r = r, best_back = back;
        }
        if (best_r < 0) return -1;
        int r = best_r, i = best_back ? s->nB[r] : s->nF[r];
        double fin = best_t + (best_back ? s->tb[r] : s->tf[r]);
        if (best_back) s->fB[r][i] = fin, s->nB[r]++;
        else s->fF[r][i] = fin, s->nF[r]++;
        s->tfree[r] = fin;
        if (fin > end) end = fin;
        if (out) out->ops[r][out->n_ops[r]++] = (hp_mm_op){.mb = i, .backward = best_back};
        done++;
    }
    return end;
}

hp_status hp_mm_schedule_make(hp_mm_mode mode, int m, const double t_f[HP_MM_ROLES], const double t_b[HP_MM_ROLES],
                              double link, hp_mm_schedule *out) {
    if (m < 1 || m > MAXM)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal schedule: %d micro-batches is outside [1, %d]", m, MAXM);
    for (int r = 0; r < HP_MM_ROLES; r++)
        if (!(t_f[r] >= 0 && isfinite(t_f[r]) && t_b[r] >= 0 && isfinite(t_b[r])))
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal schedule: group %d's pass times %g, %g must be finite "
                            "and >= 0", r, t_f[r], t_b[r]);
    if (!(link >= 0 && isfinite(link)))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "multimodal schedule: link time %g must be finite and >= 0", link);
    memset(out, 0, sizeof *out);
    out->m = m;
    sim s = {.m = m, .mode = mode, .tf = t_f, .tb = t_b, .link = link};
    int best[HP_MM_ROLES] = {3, 2, 1};
    if (mode == HP_MM_MODE_CHAIN) {
        for (int r = 0; r < 2; r++) best[r] = best[r] < m ? best[r] : m;
    } else {
        double best_t = INFINITY;
        for (int la = 1; la <= m; la++)
            for (int lb = 1; lb <= m; lb++) {
                int lim[HP_MM_ROLES] = {la, lb, 1};
                double t = simulate(&s, lim, NULL);
                if (t >= 0 && t < best_t * (1 - 1e-9)) best_t = t, best[0] = la, best[1] = lb;
            }
    }
    best[2] = 1;
    out->makespan = simulate(&s, best, out);
    if (out->makespan < 0) return hp_error(HP_STATUS_INTERNAL, "multimodal schedule: the list scheduler stalled");
    for (int r = 0; r < HP_MM_ROLES; r++) {
        out->inflight[r] = best[r];
        out->busy[r] = m * (t_f[r] + (r < HP_MM_ROLE_DEC ? t_b[r] : 0));
    }
    return HP_STATUS_OK;
}
