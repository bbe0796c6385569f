/* Internal to the library and its tests: safetensors from memory (the fuzz harness, tests/fuzz). */
#ifndef HP_IO_SAFETENSORS_INTERNAL_H
#define HP_IO_SAFETENSORS_INTERNAL_H

#include "hp/safetensors.h"

/*
 * hp_safetensors_open over the `size` bytes at `data` instead of a mapped file: the same checks and
 * errors (`name` stands for the path in messages and hp_safetensors_path). The handle borrows `data`
 * (entries point into it), which must outlive it; hp_safetensors_close does not free it.
 */
hp_status hp__safetensors_open_buffer(const void *data, size_t size, const char *name, hp_safetensors **out);

#endif
