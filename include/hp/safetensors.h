/*
 * hp/safetensors.h — reading and writing the safetensors format (Hugging Face,
 * https://github.com/huggingface/safetensors, "Format" section of its README), so checkpoints
 * open in the Python ecosystem (`safetensors.numpy.load_file`, `safetensors.torch.load_file`).
 *
 *     hp_named_tensor t[] = {{"wte.weight", HP_DTYPE_F32, HP_SHAPE(256, 64), wte}};
 *     HP_CHECK(hp_safetensors_write("model.safetensors", t, 1, NULL, 0));
 *     float back[256 * 64];
 *     hp_named_tensor want[] = {{"wte.weight", HP_DTYPE_F32, HP_SHAPE(256, 64), back}};
 *     HP_CHECK(hp_safetensors_load_into("model.safetensors", want, 1));
 *
 * File layout (all integers little-endian):
 *   8 bytes     N, the header length (u64)
 *   N bytes     a JSON object: {"NAME": {"dtype": "F32"|"BF16"|"I32", "shape": [d0, ...],
 *               "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value", ...}},
 *               padded at the end with spaces (0x20) so that 8 + N is a multiple of 8
 *   the rest    the byte buffer; offsets are relative to its start. Tensors are row-major,
 *               little-endian, stored back to back in the order written, without holes, and the
 *               buffer ends where the last tensor ends.
 * A header is at most 100 MB (the reference implementation's limit).
 *
 * Integrity (hp_safetensors_write_checked; plain hp_safetensors_write records none). The metadata
 * also holds, as ordinary string pairs that other readers ignore:
 *   "hp.checksum": "crc32"            the marker: this file records checksums
 *   "hp.crc32.<tensor>": "1a2b3c4d"   CRC-32 (zlib's crc32, ISO-HDLC) of the tensor's bytes
 *   "hp.header_crc32": "5e6f7a8b"     CRC-32 of the file's first 8 + N bytes (length and header),
 *                                     computed with this value written as "00000000"
 * (8 lowercase hex digits each). The tensor checksums are computed chunk by chunk as the bytes are
 * written; the header, rewritten in place with them, then carries its own. With these, any change
 * of the header or of a tensor's bytes after writing is detected: hp_safetensors_open checks the
 * header checksum and that every tensor has one; hp_safetensors_verify and hp_safetensors_read_into
 * check the tensors' bytes. A file with none of these keys (from another writer) opens and reads
 * as before, unverified: callers that need verified data check hp_safetensors_checksummed.
 */
#ifndef HP_SAFETENSORS_H
#define HP_SAFETENSORS_H

#include "hp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A named dense tensor in host memory: `data` holds numel(shape) * dtype_size(dtype) bytes,
 * row-major. For writing the data is read; for loading it is the caller's buffer to fill. The
 * struct borrows name and data.
 */
typedef struct hp_named_tensor {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;
    void *data;
} hp_named_tensor;

/*
 * Writes `n` tensors (names unique, not "__metadata__"; data may be NULL only for 0 bytes) and
 * `n_meta` metadata pairs (meta[2*i] = key, meta[2*i+1] = value; may be NULL when n_meta is 0) to
 * `path`, replacing it; the file is fsync'ed before returning. Errors: HP_STATUS_INVALID_ARGUMENT
 * naming a duplicate or bad tensor name or dtype; HP_STATUS_IO naming the path (with strerror) when
 * it cannot be created, written (disk full, file-size limit) or synced; the partial file is then
 * removed. HP_STATUS_OUT_OF_MEMORY.
 */
hp_status hp_safetensors_write(const char *path, const hp_named_tensor *tensors, size_t n, const char *const *meta,
                               size_t n_meta);

/*
 * Like hp_safetensors_write, and records the integrity metadata above (checksums of every tensor
 * and of the header). Errors: those of hp_safetensors_write; HP_STATUS_INVALID_ARGUMENT naming a
 * caller metadata key that is reserved for checksums ("hp.checksum", "hp.header_crc32",
 * "hp.crc32.*").
 */
hp_status hp_safetensors_write_checked(const char *path, const hp_named_tensor *tensors, size_t n,
                                       const char *const *meta, size_t n_meta);

/* Metadata keys of the integrity scheme (see the top of this file). */
#define HP_SAFETENSORS_CHECKSUM_KEY "hp.checksum"
#define HP_SAFETENSORS_HEADER_CRC_KEY "hp.header_crc32"
#define HP_SAFETENSORS_CRC_PREFIX "hp.crc32."

/* One tensor of an opened file. */
typedef struct hp_safetensors_entry {
    const char *name;
    hp_dtype dtype;
    hp_shape shape;
    size_t offset; /* bytes, from the start of the byte buffer */
    size_t nbytes;
    const void *data; /* into the mapped file; valid until hp_safetensors_close; may be unaligned */
    bool has_crc32;   /* the file records this tensor's checksum (then crc32 is it) */
    uint32_t crc32;
} hp_safetensors_entry;

/* An opened (memory-mapped, validated) file. Opaque. */
typedef struct hp_safetensors hp_safetensors;

/*
 * Opens and validates `path`: header length against the file size, header JSON, every entry's
 * dtype (F32, BF16 or I32), shape (at most HP_MAX_DIMS non-negative dims), data_offsets in range,
 * numel * dtype size == end - begin, entries contiguous and non-overlapping, the buffer fully used,
 * metadata values strings; for a file that records checksums, the header checksum (before the
 * header is parsed) and a well-formed checksum for every tensor and none for a tensor it lacks (the
 * tensors' bytes are checked when read: hp_safetensors_verify). Errors: HP_STATUS_IO when it cannot
 * be opened or mapped; every format or checksum failure is HP_STATUS_CORRUPT naming the file and,
 * where there is one, the tensor; HP_STATUS_UNSUPPORTED for a checksum algorithm other than crc32.
 * The caller closes *out with hp_safetensors_close.
 */
hp_status hp_safetensors_open(const char *path, hp_safetensors **out);
/* NULL is allowed. */
void hp_safetensors_close(hp_safetensors *f);

/* Number of tensors, and entry i in order of data offset (i < count). */
size_t hp_safetensors_count(const hp_safetensors *f);
const hp_safetensors_entry *hp_safetensors_entry_at(const hp_safetensors *f, size_t i);
/* The entry named `name`, or NULL. */
const hp_safetensors_entry *hp_safetensors_find(const hp_safetensors *f, const char *name);
/* The "__metadata__" value for `key`, or NULL. Valid until close. */
const char *hp_safetensors_metadata(const hp_safetensors *f, const char *key);
/* The path it was opened from. */
const char *hp_safetensors_path(const hp_safetensors *f);
/* Whether the file records checksums (its header checksum matched when it was opened). */
bool hp_safetensors_checksummed(const hp_safetensors *f);

/*
 * Checks entry e of f (from hp_safetensors_entry_at or _find) against its recorded checksum; OK
 * when the file records none. The result is remembered, so a second call costs nothing (the handle
 * is not safe for concurrent verification from several threads). Errors: HP_STATUS_CORRUPT naming
 * the file, the tensor, the recorded and the computed CRC-32; HP_STATUS_INVALID_ARGUMENT for an
 * entry of another file.
 */
hp_status hp_safetensors_verify(const hp_safetensors *f, const hp_safetensors_entry *e);

/*
 * Copies each requested tensor's bytes into its caller-provided `data` buffer, matched by name
 * (extra tensors in the file are ignored), checking each copied tensor's checksum when the file
 * records them. Errors name the file and the tensor: HP_STATUS_NOT_FOUND for a missing tensor;
 * HP_STATUS_SHAPE for a shape mismatch (expected and found shapes); HP_STATUS_INVALID_ARGUMENT for
 * a dtype mismatch (expected and found dtypes); HP_STATUS_CORRUPT for a checksum mismatch (as
 * hp_safetensors_verify). Buffers of tensors before the failing one, and the failing one's after a
 * checksum mismatch, may already be written.
 */
hp_status hp_safetensors_read_into(const hp_safetensors *f, hp_named_tensor *tensors, size_t n);

/* Open + hp_safetensors_read_into + close. */
hp_status hp_safetensors_load_into(const char *path, hp_named_tensor *tensors, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* HP_SAFETENSORS_H */
