/*
 * The main() of a harness outside the fuzzing build: runs LLVMFuzzerTestOneInput once on each file
 * named on the command line, or on each file of a named directory (in name order). This is how the
 * release and sanitizer builds replay the seed corpus and every committed regression input
 * (tests/fuzz/CMakeLists.txt); a crash, sanitizer report or failed invariant fails the test.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 1;
    }
    /* An exact-size copy, so that a read past the input is caught by ASan as under libFuzzer. */
    unsigned char *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            bad = 1;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad |= run_file(argv[i]);
            files++;
            continue;
        }
        struct dirent **ents;
        int n = scandir(argv[i], &ents, NULL, NULL);
        if (n < 0) {
            fprintf(stderr, "replay: cannot list %s\n", argv[i]);
            bad = 1;
            continue;
        }
        char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
        int k = 0;
        for (int j = 0; j < n; j++) {
            if (names && ents[j]->d_name[0] != '.' && (names[k] = strdup(ents[j]->d_name))) k++;
            free(ents[j]);
        }
        free(ents);
        if (!names) return 1;
        qsort(names, (size_t)k, sizeof *names, cmp_str);
        for (int j = 0; j < k; j++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], names[j]);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
                bad |= run_file(p);
                files++;
            }
            free(names[j]);
        }
        free(names);
    }
    printf("replay: %d inputs, %s\n", files, bad ? "some could not be read" : "no failure");
    return bad;
}
