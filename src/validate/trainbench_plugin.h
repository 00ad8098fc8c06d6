/* trainbench_plugin.h — the public C ABI of `trainbench conform --plugin lib.so`: what a shared
 * library must export so that trainbench can run its optimizer golden cases (outputs of the real
 * torch / transformers / bitsandbytes, reference/golden/optim/) through an external optimizer
 * step and say, per case, whether it conforms and, when not, which known mistake fits.
 * Self-contained (C99, <stddef.h> and <stdint.h> only); usable from C++ (extern "C").
 *
 * ============================== Writing a plugin ==============================
 *
 * 1. Export exactly one function:
 *
 *        #include "trainbench_plugin.h"   // from src/validate/
 *        static const TrainbenchOptimizerPlugin PLUGIN = {
 *            TRAINBENCH_PLUGIN_ABI_VERSION, "my_adamw", "adamw_torch",
 *            my_create, my_step, my_list_state, my_destroy,
 *        };
 *        const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void) { return &PLUGIN; }
 *
 *    `abi_version` must be TRAINBENCH_PLUGIN_ABI_VERSION of the header you compiled against;
 *    trainbench refuses a value outside TRAINBENCH_PLUGIN_ABI_OLDEST ..
 *    TRAINBENCH_PLUGIN_ABI_VERSION (exit 2, naming both). `implements` names the
 *    golden set the plugin is checked against: "adamw_torch", "adafactor", "adafactor_torch"
 *    or "adamw_bnb_8bit" (`trainbench conform --optim NAME` overrides it).
 *
 * 2. Build it as a shared library; this header is the only trainbench file you need:
 *
 *        cc -std=c99 -O2 -fPIC -shared -ffp-contract=off -I/path/to/trainbench/src \
 *           my_adamw.c -o my_adamw.so -lm
 *
 *    -ffp-contract=off: no FMA the source did not ask for. The goldens are bit-exact results
 *    of the libraries; where torch fuses a multiply-add (lerp_, addcmul_, add_ with alpha on
 *    CPU), write fmaf() yourself; everywhere else let each operation round on its own.
 *    Linking into a sanitizer build: a plugin loaded by an ASan-built trainbench may itself be
 *    built with the same -fsanitize flags, or without; a plugin built with -fsanitize=... can
 *    only be loaded by a binary built with it.
 *
 * 3. Run it:
 *
 *        trainbench conform --plugin ./my_adamw.so [--optim NAME] [--case GLOB]
 *                                                  [--timeout SEC] [--verbose]
 *
 *    One line per golden case: PASS / FAIL / CRASH (signal) / TIMEOUT / ERROR (your error
 *    text), the comparison that used most of its tolerance, the largest parameter ulp
 *    distance, and for a FAIL a diagnosis ("consistent with: eps inside the sqrt ...") when
 *    one of trainbench's known-mistake variants reproduces your outputs within the same
 *    tolerance. Exit 0 when every case passes, 1 otherwise, 2 when the plugin cannot be used
 *    (no such file, dlopen error, missing symbol, ABI mismatch, unknown optimizer name).
 *
 * ============================== What trainbench calls ==============================
 *
 * Each case runs in its own child process (a crash or a hang is reported, the other cases
 * still run), which loads the plugin with dlopen and then, single-threaded (the plugin may
 * use threads internally):
 *
 *     s = create(ndim, dims, &hparams, &error)         once: one parameter tensor
 *     for t = 1 .. T:  error = step(s, param, grad_t, numel)
 *         after the checked steps (1, 2, 5, 10, 20): list_state(s, out, max) and compare
 *     destroy(s)
 *
 * A failing case is then replayed, in the same process, against each known mistake of that
 * optimizer (create .. destroy again, several times): do not assume one create per process.
 *
 * - A tensor is a row-major, contiguous array of little-endian values; `dims` has `ndim`
 *   entries (0 <= ndim <= TRAINBENCH_PLUGIN_MAX_DIMS; a 0-d tensor holds one element).
 *   The goldens use shapes (1), (255) ... (100003), (64, 96), (20, 28), (12, 8339), (3, 16, 24):
 *   Adafactor factors over the last two dims and treats leading dims as a batch.
 * - param: float32[numel], updated in place. grad: float32[numel] of this step, read only.
 *   Both stay valid only for the call. numel = product of dims.
 * - create: allocate the per-tensor state, initialised as the library initialises it (all
 *   zeros for the optimizers here). Return NULL and set *error to a message to refuse (e.g.
 *   "3-D tensors are not supported"): the case is then reported as ERROR with that text.
 * - step: one optimizer step; return NULL on success, or an error message (ERROR verdict).
 *   The step count t is yours to keep, starting at 1 on the first call, as the libraries do.
 * - list_state: describe every entry the library keeps in optimizer.state[p], under the
 *   library's own key, dtype and shape (table below): fill out[0 .. min(count, max) - 1] and
 *   return count (max is TRAINBENCH_PLUGIN_MAX_STATE). Pointers must stay valid until the
 *   next step or destroy. Each key the golden has is compared with the same tolerance as
 *   trainbench's own optimizers; a key you do not list FAILS as "missing from our state",
 *   except "step": when it is not listed, trainbench compares the number of step() calls
 *   instead (which always agrees), so list it if you want your own count checked.
 * - Strings returned (name, implements, error texts, state names) must stay valid until the
 *   next call into the plugin; static strings are simplest.
 *
 * State keys, dtypes and shapes per golden set (P = the parameter's shape, N = numel):
 *   adamw_torch      step F32 0-d; exp_avg, exp_avg_sq F32 P
 *   adafactor        (transformers) step I64 0-d; RMS F32 0-d; ndim >= 2: exp_avg_sq_row F32
 *                    P[:-1], exp_avg_sq_col F32 P[:-2]+P[-1:]; else exp_avg_sq F32 P;
 *                    exp_avg F32 P only when beta1 is set (has_beta1)
 *   adafactor_torch  step F32 0-d; ndim >= 2: row_var F32 P[:-1]+(1,), col_var F32
 *                    P[:-2]+(1,)+P[-1:]; else variance F32 P
 *   adamw_bnb_8bit   step I64 0-d; N < min_8bit_size: state1, state2 F32 P; else state1,
 *                    state2 U8 P (codes), absmax1, absmax2 F32 (ceil(N/256)), qmap1, qmap2
 *                    F32 (256) (the shared code maps; list them with every tensor)
 *
 * Hyperparameters: TrainbenchHparams carries the case's values, already resolved: keys the
 * case does not set hold the library's default (e.g. AdamW weight_decay 0.01). The fields a
 * plain AdamW needs are lr, beta1, beta2, eps, weight_decay, so a C plugin needs no JSON
 * parser; `hparams_json` is the case's constructor keyword arguments verbatim (names as the
 * library spells them: {"lr": 0.001, "betas": [0.9, 0.999], ...}) for anything else.
 * The numerical contract (every rounding point of every optimizer) is reference/
 * OPTIM_SEMANTICS.md; tests/plugins/adamw_plain.c is a complete AdamW plugin to start from.
 */
#ifndef TRAINBENCH_PLUGIN_H
#define TRAINBENCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the structs or calls below. Version 2 appended
 * TrainbenchHparams.amsgrad, .maximize and .foreach; trainbench still loads version 1 plugins
 * (they read only the fields before those). */
#define TRAINBENCH_PLUGIN_ABI_VERSION 2
#define TRAINBENCH_PLUGIN_ABI_OLDEST 1

#define TRAINBENCH_PLUGIN_MAX_DIMS 4
#define TRAINBENCH_PLUGIN_MAX_STATE 8
#define TRAINBENCH_PLUGIN_SYMBOL "trainbench_optimizer_plugin"

/* Element types, named as safetensors names them. Values are fixed by the ABI. */
enum {
    TRAINBENCH_DTYPE_F32 = 1,
    TRAINBENCH_DTYPE_F16 = 2,
    TRAINBENCH_DTYPE_BF16 = 3,
    TRAINBENCH_DTYPE_F64 = 4,
    TRAINBENCH_DTYPE_U8 = 5,
    TRAINBENCH_DTYPE_I32 = 6,
    TRAINBENCH_DTYPE_I64 = 7
};

/* One state entry, as list_state reports it. */
typedef struct {
    const char* name;   /* the library's state key: "exp_avg", "step", "row_var", ... (< 64 chars) */
    int32_t dtype;      /* TRAINBENCH_DTYPE_* */
    int32_t ndim;       /* 0 .. TRAINBENCH_PLUGIN_MAX_DIMS */
    int64_t dims[TRAINBENCH_PLUGIN_MAX_DIMS];
    const void* data;   /* row-major, owned by the plugin */
} TrainbenchTensor;

/* A case's hyperparameters, resolved (library defaults where the case sets nothing). Each
 * optimizer reads the fields it has. */
typedef struct {
    const char* optimizer;     /* the golden set: "adamw_torch", "adafactor", ... */
    const char* hparams_json;  /* the case's constructor kwargs verbatim, a JSON object */
    double lr;                 /* adafactor with relative_step: 0 (the library's lr=None) */
    double beta1, beta2;       /* AdamW family: betas; adafactor: beta1 when has_beta1 */
    int32_t has_beta1;         /* adafactor: beta1 is not None */
    double eps;                /* AdamW family */
    double weight_decay;
    double eps1, eps2;         /* Adafactor eps=(eps1, eps2); adafactor_torch: eps1 < 0 means
                                  None (use the float32 machine epsilon, 2^-23) */
    double clip_threshold;     /* transformers Adafactor */
    double decay_rate;         /* transformers decay_rate / torch beta2_decay */
    double d;                  /* torch Adafactor clipping threshold */
    int32_t scale_parameter, relative_step, warmup_init;  /* transformers Adafactor, 0/1 */
    int64_t block_size;        /* bitsandbytes: 256 */
    int64_t min_8bit_size;     /* bitsandbytes: 4096; smaller tensors keep F32 state */
    /* ABI 2: */
    int32_t amsgrad;           /* torch AdamW (both paths): keep max_exp_avg_sq, 0/1 */
    int32_t maximize;          /* torch AdamW, torch Adafactor: step along +grad (grad = -grad), 0/1 */
    int32_t foreach;           /* torch AdamW, torch Adafactor: the multi-tensor path was asked for, 0/1
                                  (torch Adafactor's rounds its last update twice: p + RN(a * U)) */
} TrainbenchHparams;

typedef struct {
    uint32_t abi_version;      /* TRAINBENCH_PLUGIN_ABI_VERSION (1 is still loaded) */
    const char* name;          /* shown in the report */
    const char* implements;    /* golden set: "adamw_torch", "adafactor", "adafactor_torch", "adamw_bnb_8bit" */
    /* New state for one parameter tensor of shape dims[0 .. ndim-1]; NULL + *error to refuse. */
    void* (*create)(int32_t ndim, const int64_t* dims, const TrainbenchHparams* hp, const char** error);
    /* One step, param updated in place; NULL on success, else an error message. */
    const char* (*step)(void* state, float* param, const float* grad, int64_t numel);
    /* Fills out[0 .. min(count, max) - 1]; returns count, the number of state entries. */
    int32_t (*list_state)(void* state, TrainbenchTensor* out, int32_t max);
    void (*destroy)(void* state);
} TrainbenchOptimizerPlugin;

/* The one exported symbol. TRAINBENCH_PLUGIN_EXPORT keeps it visible when the plugin is built
 * with -fvisibility=hidden (recommended: nothing else of the plugin leaks into trainbench). */
#if defined(_WIN32)
#define TRAINBENCH_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TRAINBENCH_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
typedef const TrainbenchOptimizerPlugin* (*TrainbenchPluginEntry)(void);
TRAINBENCH_PLUGIN_EXPORT const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void);

#ifdef __cplusplus
}
#endif

#endif /* TRAINBENCH_PLUGIN_H */
