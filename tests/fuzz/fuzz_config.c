/*
 * Fuzz harness (a): the YAML run config. The input is a config file's text: it is parsed into the
 * YAML tree (hp_yaml_parse_string, src/io/yaml.c) and converted to JSON, then loaded and validated
 * as a run config (hp_run_config_load_string, src/io/config*.c: every section, strategy and
 * offload included).
 *
 * Invariants beyond "no crash, leak or UB": a failure is a status with a message and leaves the
 * defaults; a config that loads validates, and writes back (YAML and JSON, hp/config.h) as text
 * that loads again into the same config. "The same" is compared through hp_run_config_to_yaml,
 * which writes every integer exactly and every double with enough digits to read back exactly.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hp/config.h"
#include "hp/yaml.h"

/* Loads `text` (a config written by hp_run_config_to_*) and checks it writes `want` as YAML. */
static void check_reload(const char *text, const char *want) {
    FUZZ_CHECK(text != NULL);
    hp_run_config back;
    hp_status st = hp_run_config_load_string(text, strlen(text), "written.yaml", &back);
    FUZZ_CHECK(st == HP_STATUS_OK);
    char *got = hp_run_config_to_yaml(&back);
    FUZZ_CHECK(got != NULL);
    FUZZ_CHECK(strcmp(got, want) == 0);
    free(got);
    hp_run_config_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;

    hp_yaml_doc *doc = NULL;
    hp_status st = hp_yaml_parse_string(text, size, "fuzz.yaml", &doc);
    if (st == HP_STATUS_OK) {
        char *json = hp_yaml_to_json(hp_yaml_doc_root(doc));
        FUZZ_CHECK(json != NULL);
        free(json);
        hp_yaml_doc_free(doc);
    } else {
        fuzz_check_error(st);
        FUZZ_CHECK(doc == NULL);
    }

    hp_run_config cfg;
    st = hp_run_config_load_string(text, size, "fuzz.yaml", &cfg);
    if (st != HP_STATUS_OK) {
        fuzz_check_error(st);
        FUZZ_CHECK(cfg.arena == NULL && !cfg.strategy.present && !cfg.offload.present);
        hp_run_config_free(&cfg);
        return 0;
    }
    FUZZ_CHECK(hp_run_config_validate(&cfg) == HP_STATUS_OK);
    char *json = hp_run_config_to_json(&cfg);
    char *yaml = hp_run_config_to_yaml(&cfg);
    FUZZ_CHECK(json != NULL && yaml != NULL);
    check_reload(yaml, yaml);
    check_reload(json, yaml);
    free(yaml);
    free(json);
    hp_run_config_free(&cfg);
    hp_run_config_free(&cfg); /* documented as safe twice */
    return 0;
}
