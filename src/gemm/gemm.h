// gemm.h — GEMM arguments, the GemmBackend vtable and the backend registry.
// Semantics (all backends): row-major, C = alpha * op(A) * op(B) + beta * C with
//   op(A) (M, K): A is (M, K) with lda >= K, or (K, M) with lda >= M when trans_a;
//   op(B) (K, N): B is (K, N) with ldb >= N, or (N, K) with ldb >= K when trans_b;
//   C (M, N) with ldc >= N.
// Inputs A and B share one dtype (f32, bf16 or f16); products are accumulated in fp32; C is
// f32 or the input's low dtype (then the fp32 result alpha*acc + beta*C is rounded once).
// beta == 0 means C is not read (NaN already in C does not propagate), as in BLAS.
// Optional bias (GemmArgs.bias, only for backends whose `bias` flag is set, and only with
// beta == 0): C = alpha * acc + bias[j] in fp32, rounded once; the bias is added to the whole
// K sum once, which a BLAS with C preset to bias rows and beta 1 does not promise (OpenBLAS adds
// each K block's partial sum into C).
// Not here: threading policy of the rest of the program, model layers (model.h).
#ifndef TRAINBENCH_GEMM_H
#define TRAINBENCH_GEMM_H

#include "core/common.h"
#include "core/dtype.h"

// For f16 inputs, the order the naive backend sums K in: torch 2.15's on a CPU without native
// fp16 arithmetic (ATen's CPU kernels, AVX2 dispatch), measured against it (gemm_naive.c). Other
// backends and dtypes ignore it.
// Which one torch takes depends on how the operands lie in memory when they reach its cpublas
// gemm, not on the maths: a row-major A @ B whose B is the transposed view of a contiguous
// tensor (torch's "transa" call) runs ATen's fp16 dot product; the same product with B
// contiguous runs the partial sums. So the caller names the order per product (layers.c).
typedef enum {
    GEMM_F16_SUM_MM = 0,  // bmm/mm with contiguous operands: nn (and nt) in four interleaved partial
                          // sums, tn in k order
    GEMM_F16_SUM_DOT,     // B a transposed view (F.linear's x @ W^T; attention's, per product and
                          // shape: layers.h attention_f16_sum): ATen's fp16_dot_with_fp32_arith,
                          // 8 registers of 8 lanes, in any of our layouts
    GEMM_F16_SUM_PARTIAL4,  // four interleaved partial sums in any of our layouts
    GEMM_F16_SUM_KORDER,    // k order in any of our layouts (a column-major dy: layers.h dy_col_major)
} GemmF16Sum;

// torch's threshold for sending a bf16 matmul to oneDNN (more multiply-adds than this)
#define GEMM_BF16_ONEDNN_MIN_MACS ((int64_t)16 * 16 * 16)

typedef struct {
    bool trans_a, trans_b;
    int M, N, K;
    float alpha, beta;
    DType ab_dtype;  // dtype of A and B: DTYPE_F32, DTYPE_BF16 or DTYPE_F16
    DType c_dtype;   // DTYPE_F32 or == ab_dtype
    const void* A;
    int lda;
    const void* B;
    int ldb;
    void* C;
    int ldc;
    const float* bias;  // NULL, or (N) fp32 added to every row (see above; backend->bias only)
    GemmF16Sum f16_sum;  // f16 inputs on the naive backend: which torch operation's K order
    // The multiply-adds m*k*n (x the batch of a bmm) of the torch matmul this product is part
    // of, or 0 (unknown: taken as large). torch sends a bf16 matmul to oneDNN only above
    // 16*16*16 (ATen's mkldnn checksize); at most that it runs ATen's cpublas, which sums in the
    // f16 orders (f16_sum). The naive backend follows both (gemm_naive.c).
    int64_t torch_macs;
} GemmArgs;

typedef enum {
    GEMM_NATIVE = 0,   // the library computes this dtype itself
    GEMM_EMULATED,     // inputs widened exactly to fp32, then an fp32 GEMM (same math)
    GEMM_UNSUPPORTED,  // cannot run; `why` says so
    GEMM_SUPPORT_COUNT
} GemmSupport;

// One "key: value" fact about the library behind a backend (version, core, ISA), for
// `trainbench info` and machine.json.
typedef struct {
    const char* key;  // static string, e.g. "version", "core", "isa"
    char value[256];
} GemmInfoItem;

typedef struct GemmBackend {
    const char* name;         // registry name: "naive", "openblas", "onednn"
    const char* description;  // one line for `trainbench info`
    // How this backend handles a dtype combination. `why` (may be NULL) receives a reason
    // for UNSUPPORTED and a note for EMULATED.
    GemmSupport (*supports)(DType ab_dtype, DType c_dtype, char* why, size_t why_len);
    // Optional: create per-user context (primitive caches, scratch). May be NULL.
    Status (*init)(void** ctx, int threads);
    void (*free)(void* ctx);
    // Runs one GEMM. Returns STATUS_UNSUPPORTED (never falls back) if supports() says no.
    Status (*run)(void* ctx, const GemmArgs* args);
    // Optional (may be NULL): fills up to `max` facts about the library; returns how many.
    int (*library_info)(GemmInfoItem* items, int max);
    // run() honours GemmArgs.bias (with beta 0). false: gemm_run refuses a bias, and callers
    // preset C with bias rows and pass beta 1 instead.
    bool bias;
} GemmBackend;

// A ready-to-use backend instance: the vtable, its context and the thread count.
// A Gemm is used by one calling thread at a time (its context holds caches and scratch);
// open one per thread that issues GEMMs concurrently.
typedef struct {
    const GemmBackend* backend;
    void* ctx;
    int threads;
    // Wall-clock seconds spent in gemm_run (validation included) and the FLOP (2*M*N*K) it ran
    // since gemm_open: `train --profile` divides one by the other for the rate the step's GEMM
    // calls reach, to set beside the gemm/... benchmarks (two clock reads per call, ~50 ns).
    double busy_s, flop;
} Gemm;

// Registry iteration and lookup.
size_t gemm_backend_count(void);
const GemmBackend* gemm_backend_at(size_t i);
const GemmBackend* gemm_find(const char* name);  // NULL if unknown
const char* gemm_backend_names_list(void);       // "naive, openblas, onednn"

const char* gemm_support_name(GemmSupport s);    // "native", "emulated", "unsupported"

// threads <= 0 means "all cores". Fails with STATUS_UNSUPPORTED if the backend cannot start.
Status gemm_open(Gemm* g, const GemmBackend* backend, int threads);
void gemm_close(Gemm* g);
// Validates shapes/leading dimensions (STATUS_INVALID with a message), checks support
// (STATUS_UNSUPPORTED), then runs.
Status gemm_run(Gemm* g, const GemmArgs* args);
// Shape/ld validation shared by all backends; returns STATUS_OK or STATUS_INVALID.
// Checks: M, N, K >= 1; A, B, C non-NULL; ab_dtype is a GEMM input dtype (f32, bf16, f16);
// c_dtype is f32 or ab_dtype; lda >= (trans_a ? M : K), ldb >= (trans_b ? K : N), ldc >= N.
Status gemm_validate(const GemmArgs* a);
// True when (ab_dtype, c_dtype) is a combination the GEMM contract defines (see above).
// Backends' supports() answer UNSUPPORTED for any other pair.
bool gemm_dtypes_valid(DType ab_dtype, DType c_dtype);

// Helpers shared by backends that compute in fp32: widen a (rows, cols) matrix with leading
// dimension ld into a packed fp32 (rows, cols) buffer, and store an fp32 result into C's dtype.
void gemm_widen_matrix(float* dst, const void* src, DType dt, int rows, int cols, int ld);
// Scratch that grows to the largest request and is then reused (no allocation per call):
// returns *buf with room for n floats (64-byte aligned), reallocating only when n > *cap.
float* gemm_scratch_grow(float** buf, size_t* cap, size_t n);
// C = alpha*acc + beta*C, rounding to C's dtype once; beta == 0 does not read C.
void gemm_store_result(const GemmArgs* a, const float* acc /* (M, N) packed */);

// oneDNN primitive-cache counters of an open onednn Gemm (tests, `trainbench info`).
// Returns false when `g` is not an open onednn backend (or oneDNN was not built in).
typedef struct {
    size_t capacity;   // fixed number of cached primitives per context
    size_t entries;    // primitives currently cached
    size_t created;    // primitives created (cache misses) since gemm_open
    size_t hits;       // runs that reused a cached primitive
    size_t evictions;  // primitives destroyed to make room (least recently used first)
} GemmOnednnCacheStats;
bool gemm_onednn_cache_stats(const Gemm* g, GemmOnednnCacheStats* out);
// The ISA oneDNN dispatches its kernels for on this CPU, as oneDNN names it
// ("cpu_isa_avx512_core_bf16", "cpu_isa_avx512_core_amx", ...); NULL when oneDNN is not built in.
// Its bf16 matmul sums in the order of the kernels of that ISA: torch's order on the goldens'
// machine is that of avx512_core_bf16 (VDPBF16PS pairs); AMX tiles sum in another.
const char* gemm_onednn_isa(void);
#define GEMM_ONEDNN_GOLDEN_BF16_ISA "cpu_isa_avx512_core_bf16"

// The registered backends (one file each).
extern const GemmBackend gemm_backend_naive;
extern const GemmBackend gemm_backend_openblas;
extern const GemmBackend gemm_backend_onednn;

#endif
