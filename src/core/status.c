/* Status codes and the thread-local error message. */
#include "hp/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char tl_msg[1024];

const char *hp_status_str(hp_status st) {
    static const char *names[HP_STATUS_COUNT] = {
        [HP_STATUS_OK] = "ok",
        [HP_STATUS_INVALID_ARGUMENT] = "invalid argument",
        [HP_STATUS_SHAPE] = "shape mismatch",
        [HP_STATUS_OUT_OF_MEMORY] = "out of memory",
        [HP_STATUS_IO] = "I/O error",
        [HP_STATUS_CORRUPT] = "corrupt data",
        [HP_STATUS_CONFIG] = "bad configuration",
        [HP_STATUS_UNSUPPORTED] = "unsupported",
        [HP_STATUS_COMM] = "communication error",
        [HP_STATUS_NOT_FOUND] = "not found",
        [HP_STATUS_INTERNAL] = "internal error",
        [HP_STATUS_NONFINITE] = "non-finite value",
        [HP_STATUS_TIMEOUT] = "timed out",
    };
    if ((int)st < 0 || st >= HP_STATUS_COUNT) return "unknown status";
    return names[st];
}

hp_status hp_error(hp_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    return code;
}

hp_status hp_error_prefix(hp_status code, const char *fmt, ...) {
    char prefix[512], old[sizeof tl_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_msg, sizeof old);
    size_t np = strlen(prefix);
    if (np >= sizeof tl_msg) np = sizeof tl_msg - 1;
    memcpy(tl_msg, prefix, np);
    size_t no = strlen(old);
    if (np + no >= sizeof tl_msg) no = sizeof tl_msg - 1 - np;
    memcpy(tl_msg + np, old, no);
    tl_msg[np + no] = '\0';
    return code;
}

const char *hp_error_message(void) { return tl_msg; }

void hp_error_clear(void) { tl_msg[0] = '\0'; }

hp_status hp_first_error_add(hp_first_error *fe, hp_status st) {
    if (st != HP_STATUS_OK && fe->st == HP_STATUS_OK) {
        fe->st = st;
        snprintf(fe->msg, sizeof fe->msg, "%s", tl_msg);
    }
    return st;
}

hp_status hp_first_error_status(const hp_first_error *fe) {
    return fe->st == HP_STATUS_OK ? HP_STATUS_OK : hp_error(fe->st, "%s", fe->msg);
}

_Noreturn void hp__assert_fail(const char *file, int line, const char *cond) {
    hp_log(HP_LOG_LEVEL_ERROR, "%s:%d: assertion failed: %s", file, line, cond);
    /* A broken invariant is a bug: stop here so the state is inspectable (GGML_ASSERT). The
     * message also goes to stderr because the log sink may be unset. */
    fprintf(stderr, "hyperparallel: %s:%d: assertion failed: %s\n", file, line, cond);
    abort();
}
