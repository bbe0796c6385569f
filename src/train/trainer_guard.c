/*
 * Non-finite steps (hp_trainer_step): the error that stops a run names the step, the first tensor
 * found non-finite by name and the last good checkpoint; plus the test hook that forces one.
 */
#include "train/trainer_internal.h"

#include "hp/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *(*hp__trainer_poison)(int64_t step) = NULL;

/* Index of the first non-finite element of x[0..n), or -1. */
static int64_t first_nonfinite(const float *x, int64_t n) {
    for (int64_t i = 0; x && i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* Looks at this rank's parameters (in creation order), then the gradients in the order the
 * backward pass computed them, and writes "parameter 'NAME' (element I of this rank's block is
 * V)" or "gradient of 'NAME' (...)" for the first holding a NaN or Inf; or a note that none does
 * (a gradient's buffer may have been reused once the update read it). */
static void find_first(hp_trainer *t, char *out, size_t cap) {
    hp_trainer_prog *pr = &t->train;
    int n = pr->step.n_params;
    if (!t->pipe && hp_program_sync(pr->p) != HP_STATUS_OK) {
        snprintf(out, cap, "unknown (deferred optimizer updates failed: %s)", hp_error_message());
        return;
    }
    /* a pipeline's parameters are in its stages' store (those of this rank's stages), and its
     * gradients in the stages' programs: only the parameters are looked at */
    hp_store *store = t->pipe ? hp_pipeline_store(t->pipe) : t->store;
    for (int i = 0; i < n; i++) {
        const char *name = hp_graph_tensor(pr->lg, pr->step.params[i])->name;
        hp_store_entry_info e;
        if (hp_store_info(store, name, &e) != HP_STATUS_OK || e.tier == HP_TIER_DISK) continue;
        const float *x = hp_store_data(store, name);
        int64_t k = first_nonfinite(x, hp_shape_numel(&e.local_shape));
        if (k >= 0) {
            snprintf(out, cap, "parameter '%s' (element %lld of this rank's block is %g)", name, (long long)k,
                     (double)x[k]);
            return;
        }
    }
    if (t->pipe) {
        snprintf(out, cap, "none among the parameters of this rank's pipeline stages (the loss or a gradient is not "
                 "finite, or another rank's block)");
        return;
    }
    int *order = malloc(sizeof *order * (n > 0 ? (size_t)n : 1));
    if (!order) {
        snprintf(out, cap, "unknown (out of memory looking for it)");
        return;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    /* insertion sort by the producing node: the backward pass computes the last layers first */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            int a = order[j - 1], b = order[j];
            if (hp_graph_tensor(pr->lg, pr->step.grads[a])->producer <= hp_graph_tensor(pr->lg, pr->step.grads[b])->producer)
                break;
            order[j - 1] = b;
            order[j] = a;
        }
    const hp_graph *lg = hp_partition_graph(pr->part);
    for (int r = 0; r < n; r++) {
        int i = order[r];
        hp_tid local = hp_partition_local(pr->part, pr->step.grads[i]);
        if (local == HP_TID_NONE) continue;
        const float *x = hp_program_data(pr->p, local);
        if (!x) x = hp_program_arena_peek(pr->p, local); /* a planned activation: a hint (see there) */
        int64_t k = first_nonfinite(x, hp_shape_numel(&hp_graph_tensor(lg, local)->shape));
        if (k >= 0) {
            snprintf(out, cap, "gradient of '%s' (element %lld of this rank's block is %g; the first one the backward "
                     "pass computed)", hp_graph_tensor(pr->lg, pr->step.params[i])->name,
                     (long long)k, (double)x[k]);
            free(order);
            return;
        }
    }
    free(order);
    snprintf(out, cap, "none among this rank's parameters and the gradients still in memory (the loss itself is not "
             "finite, or another rank's block)");
}

hp_status hp__trainer_nonfinite_error(hp_trainer *t, int64_t step, double loss, double grad_norm) {
    char what[700];
    find_first(t, what, sizeof what);
    char last[4200];
    if (t->last_ckpt[0])
        snprintf(last, sizeof last, "the last good checkpoint is '%s'", t->last_ckpt);
    else
        snprintf(last, sizeof last, "no checkpoint was saved or resumed from by this run yet");
    char state[96];
    if (t->last_applied > 0)
        snprintf(state, sizeof state, "those after step %lld, the last update applied", (long long)t->last_applied);
    else
        snprintf(state, sizeof state, "the initial ones: no update was applied yet");
    return hp_error(HP_STATUS_NONFINITE,
                    "step %lld is not finite: loss %g, gradient norm %g; first non-finite tensor: %s. The update was "
                    "not applied (parameters and optimizer state are %s); %s. %lld non-finite step%s in a row, "
                    "train.skip_nonfinite is %lld. Lower optim.lr, set optim.grad_clip, or set train.skip_nonfinite "
                    "to skip such steps", (long long)step, loss, grad_norm, what, state, last,
                    (long long)t->nonfinite_in_row, t->nonfinite_in_row == 1 ? "" : "s",
                    (long long)t->cfg.train.skip_nonfinite);
}

hp_status hp__trainer_poison_apply(hp_trainer *t, int64_t step, const char **name, float *saved) {
    *name = hp__trainer_poison ? hp__trainer_poison(step) : NULL;
    if (!*name) return HP_STATUS_OK;
    HP_CHECK(hp_program_sync(t->train.p));
    float *x = hp_store_data(t->store, *name);
    if (!x) return hp_error(HP_STATUS_NOT_FOUND, "test hook: no parameter '%s' in memory to poison", *name);
    *saved = x[0];
    x[0] = NAN;
    return hp_store_touch(t->store, *name);
}

hp_status hp__trainer_poison_restore(hp_trainer *t, const char *name, float saved) {
    if (!name) return HP_STATUS_OK;
    HP_CHECK(hp_program_sync(t->train.p));
    float *x = hp_store_data(t->store, name);
    if (!x) return hp_error(HP_STATUS_NOT_FOUND, "test hook: no parameter '%s' in memory to restore", name);
    x[0] = saved;
    return hp_store_touch(t->store, name);
}
