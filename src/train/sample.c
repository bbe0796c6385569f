/* Token sampling with temperature, top-k and top-p (nucleus): hp_sample_token (hp/generate.h). */
#include "hp/generate.h"

#include <math.h>
#include <stdlib.h>

typedef struct ranked {
    float logit;
    int id;
} ranked;

/* Decreasing logit, then increasing id: a total order, so the result does not depend on qsort. */
static int by_logit_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

hp_status hp_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, double u, int *token) {
    *token = 0;
    if (V < 1) return hp_error(HP_STATUS_INVALID_ARGUMENT, "sample: vocabulary size %d must be >= 1", V);
    if (!(u >= 0.0 && u < 1.0)) return hp_error(HP_STATUS_INVALID_ARGUMENT, "sample: uniform draw %g is outside [0, 1)", u);
    if (!(top_p > 0.0f)) return hp_error(HP_STATUS_INVALID_ARGUMENT, "sample: top_p %g must be in (0, 1]", (double)top_p);
    int best = 0;
    for (int j = 0; j < V; j++) {
        if (logits[j] != logits[j]) return hp_error(HP_STATUS_INVALID_ARGUMENT, "sample: logit %d is NaN", j);
        if (logits[j] > logits[best]) best = j;
    }
    if (temperature <= 0.0f || top_k == 1) {
        *token = best;
        return HP_STATUS_OK;
    }
    const double mx = logits[best], t = temperature;
    if ((top_k <= 0 || top_k >= V) && top_p >= 1.0f) { /* plain softmax sampling, ids in order */
        double z = 0, acc = 0;
        for (int j = 0; j < V; j++) z += exp(((double)logits[j] - mx) / t);
        double target = u * z;
        for (int j = 0; j < V; j++) {
            acc += exp(((double)logits[j] - mx) / t);
            if (acc > target) {
                *token = j;
                return HP_STATUS_OK;
            }
        }
        *token = best;
        return HP_STATUS_OK;
    }
    ranked *r = malloc((size_t)V * sizeof *r);
    if (!r) return hp_error(HP_STATUS_OUT_OF_MEMORY, "sample: out of memory sorting %d logits", V);
    for (int j = 0; j < V; j++) r[j] = (ranked){logits[j], j};
    qsort(r, (size_t)V, sizeof *r, by_logit_desc);
    int k = top_k > 0 && top_k < V ? top_k : V;
    double z = 0;
    for (int j = 0; j < k; j++) z += exp(((double)r[j].logit - mx) / t);
    if (top_p < 1.0f) { /* the shortest prefix holding top_p of the (top-k) mass */
        double acc = 0, need = (double)top_p * z;
        int keep = 0;
        while (keep < k) {
            acc += exp(((double)r[keep].logit - mx) / t);
            keep++;
            if (acc >= need) break;
        }
        k = keep;
        z = acc;
    }
    double target = u * z, acc = 0;
    *token = r[0].id;
    for (int j = 0; j < k; j++) {
        acc += exp(((double)r[j].logit - mx) / t);
        if (acc > target) {
            *token = r[j].id;
            break;
        }
    }
    free(r);
    return HP_STATUS_OK;
}
