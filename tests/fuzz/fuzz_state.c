/*
 * Fuzz harness (c): a checkpoint's state.json. The input is the file's text, written to
 * <tmp>/state.json and read with hp_checkpoint_read_state(<tmp>) (src/train/checkpoint.c): the
 * JSON, its format_version, step and seed, and the saved run config (loaded and validated through
 * hp_run_config_load_string, so the config's checks are reached from JSON as well).
 *
 * Invariants: a failure is a status with a message and leaves nothing owned; a state that reads
 * has a supported format_version, a step >= 0 and, when it has a config, one that validates.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hp/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(HP_CHECKPOINT_STATE_FILE, data, size);
    hp_checkpoint_state s;
    hp_status st = hp_checkpoint_read_state(fuzz_tmpdir(), &s);
    if (st != HP_STATUS_OK) {
        fuzz_check_error(st);
        FUZZ_CHECK(s.extra_json == NULL && s.config.arena == NULL && !s.has_config);
        hp_checkpoint_state_free(&s);
        return 0;
    }
    FUZZ_CHECK(s.format_version >= 1 && s.format_version <= HP_CHECKPOINT_FORMAT_VERSION);
    FUZZ_CHECK(s.step >= 0);
    if (s.has_config) FUZZ_CHECK(hp_run_config_validate(&s.config) == HP_STATUS_OK);
    if (s.extra_json) FUZZ_CHECK(strlen(s.extra_json) > 0);
    hp_checkpoint_state_free(&s);
    hp_checkpoint_state_free(&s); /* safe twice */
    return 0;
}
