/*
 * The cost-model stage split (pipeline.split: auto): the model's blocks cut into contiguous
 * virtual stages so that the slowest stage, embedding and head included, is as fast as possible.
 */
#include "hp/pipeline.h"

#include <stdlib.h>

/* Seconds of one micro-batch (F + B + W) of a stage of the given parts. */
static hp_status stage_cost(const hp_gpt_config *model, hp_gpt_stage part, int rows, int seq, int m,
                            const hp_machine_model *mm, double *out) {
    hp_pipeline_stage_plan sp;
    HP_CHECK(hp_pipeline_plan_stage(model, &part, rows, seq, m, mm, &sp));
    *out = sp.f_seconds + sp.b_seconds + sp.w_seconds;
    return HP_STATUS_OK;
}

hp_status hp_pipeline_auto_split(const hp_gpt_config *model, int n_stages, int rows, int seq, int m,
                                 const hp_machine_model *mm, int *first_layer, double *max_seconds) {
    int L = model->layers, n = n_stages;
    if (n < 1 || n > L + 2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: %d stages for %d layers", n, L);
    /* one block's cost (the blocks are alike), and what the embedding and the head add */
    double block, emb1, head1;
    HP_CHECK(stage_cost(model, (hp_gpt_stage){0, 1, false, false}, rows, seq, m, mm, &block));
    HP_CHECK(stage_cost(model, (hp_gpt_stage){0, 1, true, false}, rows, seq, m, mm, &emb1));
    HP_CHECK(stage_cost(model, (hp_gpt_stage){0, 1, false, true}, rows, seq, m, mm, &head1));
    double emb = emb1 - block, head = head1 - block;
    if (emb < 0) emb = 0;
    if (head < 0) head = 0;
    /* best[k][j]: the least possible slowest stage when stages 0..k-1 take blocks 0..j-1; the
     * cut before stage k at cut[k][j] (min-max partition by dynamic programming, O(n L^2)) */
    size_t cells = (size_t)(n + 1) * (size_t)(L + 1);
    double *best = malloc(cells * sizeof *best);
    int *cut = malloc(cells * sizeof *cut);
    if (!best || !cut) {
        free(best), free(cut);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory splitting %d layers", L);
    }
#define AT(a, k, j) (a)[(size_t)(k) * (size_t)(L + 1) + (size_t)(j)]
    for (size_t c = 0; c < cells; c++) best[c] = 1e300, cut[c] = 0;
    AT(best, 0, 0) = 0;
    for (int k = 1; k <= n; k++)
        for (int j = 0; j <= L; j++)
            for (int i = 0; i <= j; i++) { /* stage k-1 takes blocks [i, j) */
                if (AT(best, k - 1, i) >= 1e300) continue;
                double c = (j - i) * block + (k == 1 ? emb : 0) + (k == n ? head : 0);
                /* a stage with no block needs the embedding or the head */
                if (i == j && k != 1 && k != n) continue;
                double worst = c > AT(best, k - 1, i) ? c : AT(best, k - 1, i);
                if (worst < AT(best, k, j)) AT(best, k, j) = worst, AT(cut, k, j) = i;
            }
    hp_status st = HP_STATUS_OK;
    if (AT(best, n, L) >= 1e300) {
        st = hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: %d layers cannot fill %d stages", L, n);
    } else {
        for (int k = n, j = L; k >= 1; k--) {
            first_layer[k - 1] = AT(cut, k, j);
            j = AT(cut, k, j);
        }
        if (max_seconds) *max_seconds = AT(best, n, L);
    }
#undef AT
    free(best), free(cut);
    return st;
}
