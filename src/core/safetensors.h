// safetensors.h — reader and writer for the safetensors format (goldens, checkpoints,
// candidate outputs), compatible with the Python/Rust `safetensors` reference library.
//
// Format: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON object, then the data
// region. Each JSON key is a tensor name mapping to
//   {"dtype": "F32", "shape": [ints], "data_offsets": [begin, end]}
// for every dtype of the format's list (safetensors 0.8: BOOL, U8, I8, U16, I16, U32, I32, U64,
// I64, F8_E4M3, F8_E4M3FNUZ, F8_E5M2, F8_E5M2FNUZ, F8_E8M0, F4, F6_E2M3, F6_E3M2, F16, BF16,
// F32, F64, C64: the DType table), case-sensitive
// with offsets relative to the start of the data region; the optional key "__metadata__"
// maps to a flat object of string -> string. Data is raw little-endian, row-major.
//
// Reader: accepts any key order and any header length; validates everything (types,
// dtypes, shapes, offsets, contiguity like the Rust reference: tensors sorted by begin must
// tile the data region exactly; unknown extra fields in an entry are ignored, as there) and
// returns STATUS_INVALID with one message naming the file and the problem; never reads
// outside the given bytes. Tensor data is always aligned to at least its element size
// (copied into 64-byte aligned slots when the file's layout is not).
// Writer: lays tensors out contiguously in the order added, writes "__metadata__" first when
// present, pads the header with spaces so 8 + N is a multiple of 8 (as the reference does),
// and saves atomically (temp file + rename), tensor by tensor.
//
// Packed sub-byte dtypes (F4: 4 bits, F6_*: 6 bits per element) follow the format's rule: a
// tensor is numel * bits / 8 bytes and numel * bits must be a multiple of 8; element i is bits
// [i*bits, (i+1)*bits) of the data read as a little-endian bit stream (dtype_code_at).
// A dtype name outside the table is refused (STATUS_INVALID naming it and the allowed names),
// unless StReadOptions.allow_unknown_dtypes: then the tensor is kept as DTYPE_UNKNOWN with its
// name in `unknown_dtype`, its shape as written and nbytes = its data_offsets span; every other
// rule (offsets, contiguity, bounds) still applies, only shape x element size cannot be checked.
//
// Not here: memory mapping or lazy loading (files are read whole), value conversion (dtype.h),
// tolerance comparison of tensors (check.c), and the meaning of particular tensor names (model.h).
// Little-endian hosts only: the build refuses big-endian targets.
#ifndef TRAINBENCH_SAFETENSORS_H
#define TRAINBENCH_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/dtype.h"

#define ST_MAX_NDIM 8
#define ST_MAX_HEADER_BYTES 100000000u  // 100 MB, the reference library's limit

typedef struct {
    char* name;
    DType dtype;
    int ndim;                       // 0 = scalar (numel 1)
    int64_t shape[ST_MAX_NDIM];     // (shape[0], ..., shape[ndim-1]); unused entries are 0
    size_t numel;                   // product of shape (1 for a scalar, 0 if any dim is 0)
    size_t nbytes;                  // numel * element bits / 8 (DTYPE_UNKNOWN: the offsets' span)
    void* data;                     // (numel) elements of dtype, aligned to >= element size;
                                    // owned by the SafeTensors; never NULL, even when nbytes 0
    char* unknown_dtype;            // DTYPE_UNKNOWN only: the dtype name as written; else NULL
} StTensor;

typedef struct {
    bool allow_unknown_dtypes;      // keep tensors of unknown dtype names (DTYPE_UNKNOWN)
} StReadOptions;

typedef struct {
    char* path;                     // file name used in messages
    StTensor* tensors;              // (n_tensors) in data-offset (file layout) order
    size_t n_tensors;
    char** meta_keys;               // (n_meta) "__metadata__" keys, in header order
    char** meta_values;             // (n_meta)
    size_t n_meta;
    void* storage;                  // backing buffer for all tensor data (internal)
} SafeTensors;

// Reads the whole file at `path` into memory and parses it. On success *out owns everything
// (free with st_free). On failure *out is left empty (zeroed) and the Status is STATUS_IO
// (cannot read) or STATUS_INVALID (malformed), with a message naming the file and the problem.
Status st_read(const char* path, SafeTensors* out);

// st_read with options (NULL: the defaults, as st_read).
Status st_read_opts(const char* path, const StReadOptions* opts, SafeTensors* out);
// The dtype name of a tensor as the file spells it ("F32", or the unknown name).
const char* st_dtype_text(const StTensor* t);

// Parses `len` bytes of a safetensors file; `name_for_messages` names it in messages and is
// stored as out->path. The bytes are copied (the caller keeps `buf`). Same outcome contract
// as st_read. *out is overwritten, not freed.
Status st_parse(const uint8_t* buf, size_t len, const char* name_for_messages, SafeTensors* out);
Status st_parse_opts(const uint8_t* buf, size_t len, const char* name_for_messages,
                     const StReadOptions* opts, SafeTensors* out);

// NULL when there is no tensor / metadata key of that name.
const StTensor* st_find(const SafeTensors* st, const char* name);
const char* st_meta(const SafeTensors* st, const char* key);

// Frees everything and zeroes *st; safe on a zeroed or already freed SafeTensors.
void st_free(SafeTensors* st);

// A fresh f32 copy of a F32, F16 or BF16 tensor (widening is exact). *out is (numel) floats,
// 64-byte aligned, free with free(). Other dtypes: STATUS_INVALID, *out NULL.
Status st_tensor_to_f32(const StTensor* t, float** out);

// ---- Writer ----
typedef struct StWriter StWriter;

StWriter* st_writer_new(void);
// Adds a tensor; `data` holds (numel) elements of dt, little-endian (packed types: dtype_nbytes
// bytes, bit stream as above), and is copied (it may be NULL only when numel is 0). dt is any
// table dtype; a packed tensor whose numel * bits is not a multiple of 8 is a bug (CHECK). shape is (ndim) entries, ndim 0..ST_MAX_NDIM, dims >= 0.
// Programming errors (duplicate or non-UTF-8 name, name "__metadata__", bad ndim/dims, size
// overflow) are bugs and abort through CHECK.
void st_writer_add(StWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                   const void* data);
// As st_writer_add, but `data` is NOT copied: it must stay valid and unchanged until the
// writer is saved or freed (checkpoints of large models: no second copy in memory).
void st_writer_add_ref(StWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                       const void* data);
// Sets a "__metadata__" entry (both UTF-8; CHECKed); setting a key again replaces its value.
void st_writer_meta(StWriter* w, const char* key, const char* value);
// The complete file image in a fresh buffer (*buf, free with free(); *len bytes).
Status st_writer_serialize(const StWriter* w, uint8_t** buf, size_t* len);
// Writes the file atomically (temp file PATH.tmp.<pid> in the same folder, fsync, rename),
// streaming each tensor from its buffer (no whole-file image in memory): on failure
// (STATUS_IO: every write, the fsync and the close are checked) nothing is left at `path`
// that was not there before.
Status st_writer_save(const StWriter* w, const char* path);
void st_writer_free(StWriter* w);

#endif
