/*
 * Helpers shared by the fuzz harnesses of tests/fuzz (see README.md there). A harness defines
 * LLVMFuzzerTestOneInput; it is linked with libFuzzer in the fuzzing build (build-fuzz/) and with
 * replay_main.c elsewhere, where it replays the seed corpus and the regressions.
 */
#ifndef HP_FUZZ_UTIL_H
#define HP_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "hp/core.h"

/* The libFuzzer entry point every harness defines. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test. A violation is a finding: print it and abort, so that
 * libFuzzer saves the input as a crash. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, #cond);                                         \
    } while (0)

_Noreturn void fuzz_fail(const char *file, int line, const char *what);

/* A failure must be a real status with a message (the library's error contract). */
void fuzz_check_error(hp_status st);

/* A private directory for the harness's files (under /dev/shm when it exists, else $TMPDIR or
 * /tmp), made on first use and removed with its files at exit. Aborts when it cannot be made
 * (a problem of the machine, not a finding). */
const char *fuzz_tmpdir(void);

/* Writes `n` bytes to <fuzz_tmpdir()>/<name>, replacing the file. Aborts on an I/O failure. */
void fuzz_write_file(const char *name, const void *data, size_t n);

#endif
