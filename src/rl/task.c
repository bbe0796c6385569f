/* The verifiable task of hp/rl.h: digit strings to reverse or sort, exact-match reward. */
#include "hp/rl.h"
#include "hp/rng.h"

#include <string.h>

int hp_rl_prompt_max(const hp_rl_config *r) { return (int)r->max_digits + 1; }

int hp_rl_prompt(const hp_rl_config *r, uint64_t seed, int64_t index, int32_t *out) {
    const uint64_t key = hp_rng_hash("rl.prompt") ^ seed;
    const uint64_t c = (uint64_t)index * 32u;
    int span = (int)(r->max_digits - r->min_digits + 1);
    int d = (int)r->min_digits + (int)(hp_rng_u64(key, c) % (uint64_t)span);
    for (int i = 0; i < d; i++) out[i] = '0' + (int32_t)(hp_rng_u64(key, c + 1 + (uint64_t)i) % 10u);
    out[d] = '>';
    return d + 1;
}

int hp_rl_answer(const hp_rl_config *r, const int32_t *prompt, int len, int32_t *out) {
    int d = len - 1;
    if (strcmp(r->task, "sort") == 0) {
        int count[10] = {0}, k = 0;
        for (int i = 0; i < d; i++) count[prompt[i] - '0']++;
        for (int v = 0; v < 10; v++)
            for (int j = 0; j < count[v]; j++) out[k++] = '0' + v;
    } else {
        for (int i = 0; i < d; i++) out[i] = prompt[d - 1 - i];
    }
    out[d] = '\n';
    return d + 1;
}

double hp_rl_reward(const hp_rl_config *r, const int32_t *prompt, int len, const int32_t *completion, int n) {
    int32_t want[32];
    int m = hp_rl_answer(r, prompt, len, want);
    if (n < m) return 0.0;
    for (int i = 0; i < m; i++)
        if (completion[i] != want[i]) return 0.0;
    return 1.0;
}
