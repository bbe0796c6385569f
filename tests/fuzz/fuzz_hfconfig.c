/*
 * Fuzz harness (e): a Hugging Face config.json (hp/hf.h). The input is the file's text: it is
 * parsed and checked into an architecture (hp_hf_config_parse, src/io/hf_config.c).
 *
 * Invariants beyond "no crash, leak or UB": a failure is a status with a message; an accepted
 * config has sizes in [1, 2^31-1] that divide as the family needs; the config.json written for it
 * (hp_hf_config_json), alone and on top of the input's own keys, parses back into the same
 * architecture (a qwen2 is written as a llama; a mixtral keeps its experts, top-k and
 * router_aux_loss_coef).
 */
#include <string.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "hp/hf.h"

static void check_same(const hp_hf_arch *a, const char *text) {
    FUZZ_CHECK(text != NULL);
    hp_hf_arch b;
    FUZZ_CHECK(hp_hf_config_parse(text, "written.json", &b) == HP_STATUS_OK);
    FUZZ_CHECK(a->family == b.family && a->vocab == b.vocab && a->context == b.context && a->layers == b.layers &&
               a->heads == b.heads && a->kv_heads == b.kv_heads && a->width == b.width &&
               a->ffn_width == b.ffn_width && a->norm_eps == b.norm_eps && a->rope_base == b.rope_base &&
               a->tied_head == b.tied_head && a->dropout == b.dropout && a->experts == b.experts &&
               a->top_k == b.top_k && a->aux_loss_coef == b.aux_loss_coef);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    hp_hf_arch a;
    hp_status st = hp_hf_config_parse(text, "fuzz.json", &a);
    if (st != HP_STATUS_OK) {
        fuzz_check_error(st);
        free(text);
        return 0;
    }
    const int64_t big = 2147483647;
    FUZZ_CHECK(a.vocab >= 1 && a.vocab <= big && a.context >= 1 && a.context <= big && a.layers >= 1 &&
               a.layers <= big && a.heads >= 1 && a.heads <= big && a.width >= 1 && a.width <= big &&
               a.kv_heads >= 1 && a.ffn_width >= 1);
    FUZZ_CHECK(a.width % a.heads == 0 && a.heads % a.kv_heads == 0);
    FUZZ_CHECK(a.experts == 0 ? a.top_k == 0 : a.family == HP_HF_FAMILY_LLAMA && a.top_k >= 1 && a.top_k <= a.experts);
    char *alone = hp_hf_config_json(&a, NULL), *over = hp_hf_config_json(&a, text);
    check_same(&a, alone);
    check_same(&a, over);
    free(alone);
    free(over);
    free(text);
    return 0;
}
