/* Helpers shared by the Hugging Face interop files (src/io/hf*.c, src/train/hf_convert*.c). */
#ifndef HP_IO_HF_INTERNAL_H
#define HP_IO_HF_INTERNAL_H

#include "hp/hf.h"

#define HP__HF_PATH 4096

/* out (HP__HF_PATH bytes) = dir "/" name; HP_STATUS_INVALID_ARGUMENT when too long. */
hp_status hp__hf_join(char *out, const char *dir, const char *name);
/* The whole file as a malloc'd NUL-terminated string; HP_STATUS_IO naming the path. */
hp_status hp__hf_read_text(const char *path, char **out);
/* Writes text to path (replacing it); HP_STATUS_IO naming the path. */
hp_status hp__hf_write_text(const char *path, const char *text);
/* mkdir -p; HP_STATUS_IO naming the path. */
hp_status hp__hf_mkdir_p(const char *dir);
/* Copies src to dst (replacing it); HP_STATUS_IO naming the path that failed. */
hp_status hp__hf_copy_file(const char *src, const char *dst);
/* Whether path is an existing regular file. */
bool hp__hf_is_file(const char *path);

#endif
