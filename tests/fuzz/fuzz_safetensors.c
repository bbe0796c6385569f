/*
 * Fuzz harness (b): the safetensors reader. The input is a whole .safetensors file, opened from
 * memory (hp__safetensors_open_buffer: the checks of hp_safetensors_open on an exact-size buffer,
 * so ASan sees any read past the file's end).
 *
 * Invariants: a failure is a status with a message; an opened file's entries are in offset order,
 * tile the data buffer exactly, each holds numel(shape) * dtype size bytes, can be found by name and
 * read back with hp_safetensors_read_into; asking for a wrong shape or dtype fails cleanly.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hp/safetensors.h"
#include "io/safetensors_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hp_safetensors *f = NULL;
    hp_status st = hp__safetensors_open_buffer(data, size, "fuzz.safetensors", &f);
    if (st != HP_STATUS_OK) {
        fuzz_check_error(st);
        FUZZ_CHECK(f == NULL);
        return 0;
    }
    FUZZ_CHECK(strcmp(hp_safetensors_path(f), "fuzz.safetensors") == 0);
    size_t n = hp_safetensors_count(f), pos = 0, header = 0;
    for (int i = 0; i < 8 && size >= 8; i++) header |= (size_t)data[i] << (8 * i);
    FUZZ_CHECK(size >= 8 && header <= size - 8);
    const uint8_t *buffer = data + 8 + header;
    for (size_t i = 0; i < n; i++) {
        const hp_safetensors_entry *e = hp_safetensors_entry_at(f, i);
        FUZZ_CHECK(e != NULL && e->name != NULL);
        FUZZ_CHECK(e->dtype >= 0 && e->dtype < HP_DTYPE_COUNT);
        FUZZ_CHECK(e->shape.ndim >= 0 && e->shape.ndim <= HP_MAX_DIMS);
        FUZZ_CHECK(e->offset == pos);
        FUZZ_CHECK((uint64_t)hp_shape_numel(&e->shape) * hp_dtype_size(e->dtype) == e->nbytes);
        FUZZ_CHECK((const uint8_t *)e->data == buffer + e->offset);
        pos += e->nbytes;
        FUZZ_CHECK(hp_safetensors_find(f, e->name) == e);

        void *out = malloc(e->nbytes ? e->nbytes : 1);
        FUZZ_CHECK(out != NULL);
        hp_named_tensor t = {e->name, e->dtype, e->shape, out};
        FUZZ_CHECK(hp_safetensors_read_into(f, &t, 1) == HP_STATUS_OK);
        FUZZ_CHECK(e->nbytes == 0 || memcmp(out, e->data, e->nbytes) == 0);
        hp_named_tensor wrong_dtype = {e->name, (hp_dtype)((e->dtype + 1) % HP_DTYPE_COUNT), e->shape, out};
        fuzz_check_error(hp_safetensors_read_into(f, &wrong_dtype, 1));
        hp_named_tensor wrong_shape = {e->name, e->dtype, e->shape, out};
        wrong_shape.shape.ndim = e->shape.ndim < HP_MAX_DIMS ? e->shape.ndim + 1 : e->shape.ndim - 1;
        if (wrong_shape.shape.ndim > e->shape.ndim) wrong_shape.shape.dim[e->shape.ndim] = 1;
        fuzz_check_error(hp_safetensors_read_into(f, &wrong_shape, 1));
        free(out);
    }
    FUZZ_CHECK(pos == size - 8 - header);
    FUZZ_CHECK(hp_safetensors_entry_at(f, n) == NULL);
    hp_named_tensor missing = {"\x01 no such tensor", HP_DTYPE_F32, {0}, NULL};
    fuzz_check_error(hp_safetensors_read_into(f, &missing, 1));
    (void)hp_safetensors_metadata(f, "format");
    (void)hp_safetensors_metadata(f, "step");
    hp_safetensors_close(f);
    return 0;
}
