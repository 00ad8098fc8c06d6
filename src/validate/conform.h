// conform.h — runs an optimizer golden case (reference/golden/optim/<optim>/<case>.safetensors,
// format in reference/README.md) through an Optimizer and compares params and every state
// tensor the library kept, at each checked step, with the tolerance of that optimizer/tensor.
// Also: the same comparison against a known-mistake variant instead of the golden (the
// diagnosis of `trainbench conform`), and external optimizers loaded from a plugin
// (src/validate/trainbench_plugin.h) wrapped as an Optimizer, so one code path checks all of them.
// Used by tests/test_optim.c and the `trainbench conform` command (this file's conform.c).
#ifndef TRAINBENCH_CONFORM_H
#define TRAINBENCH_CONFORM_H

#include <stdio.h>

#include "validate/compare.h"
#include "optim/optim.h"
#include "optim/optim_mistakes.h"

#define GOLDEN_OPTIM_DIR "reference/golden/optim"

typedef struct {
    double atol, rtol;          // floats: |x - ref| <= atol + rtol*|ref| + move_k*moved
    double move_k;              // times the element's cumulative |delta p| over the steps so far
    double min_code_equal;      // uint8 codes: fraction identical required
    int max_code_dist;          // uint8 codes: max distance allowed
    const char* why;            // the justification printed with the result
} Tolerance;

// The tolerance for one optimizer's tensor ("param", or a state key such as "exp_avg") after
// step `step` (1-based; some differences accumulate over steps).
Tolerance conform_tolerance(const char* optim_name, const char* tensor, int64_t step);

typedef struct {
    size_t n_compared, n_failed;  // tensor comparisons
    double worst_used;            // max share of tolerance used over all float comparisons
    uint32_t worst_ulp_param;     // max ulp distance of params over all checked steps
    uint32_t worst_ulp_state;     // the same over float state tensors (exp_avg, RMS, absmax...)
    double min_code_equal;        // min fraction of identical codes (1 if no codes)
    int max_code_dist;
    // The comparison that used most of its tolerance, any kind ("step20 param"): a failed
    // code, missing or mis-shaped tensor counts as infinitely over; worst_any_used is its share.
    char worst_at[80];
    double worst_any_used;
    char first_fail_at[80];       // the first failing comparison ("" when none)
    // Verdict bands (reference/CONFORMANCE.md): comparisons that pass only through the
    // rounding-order band (not bit-exact, not within the tolerance), and each tensor's band at
    // the first failing step (else the last checked step): "param within tolerance, exp_avg
    // differs by rounding only, exp_avg_sq FAILS".
    size_t n_rounding_only;
    int64_t bands_step, cur_step;
    int bands_rank, cur_rank;     // 0 ordinary, 1 rounding only, 2 fails
    char bands[400], cur[400];
} ConformSummary;

// Checks that an optimizer golden is usable (conform.c says what that means): STATUS_INVALID
// naming the file and what is missing. conform_run_case and `check` call it first.
#include "core/safetensors.h"
Status conform_golden_validate(const SafeTensors* st, const char* optim_name);

// Elements of x beyond max(tolerance, rounding-order band) against ref (band[i] NaN: no band,
// bit-exact or NaN-as-NaN only there); *used = the largest share of that allowance used.
// U8 codes of x outside the codes band[i] reaches below and above ref's (rounding_band.h
// code_band_pack; NaN: any difference); 0 = all within. *used: the largest share of the
// reachable codes on a differing code's side.
size_t conform_codes_beyond_band(const uint8_t* x, const uint8_t* ref, size_t n, const double* band, double* used);
size_t conform_count_beyond_band(const float* x, const float* ref, size_t n, const Tolerance* tol, const double* moved,
                                 const double* band, double* used);

// Runs one case. Each comparison prints one line to `log` (NULL: silent). STATUS_INVALID if
// the golden file is unusable (missing tensors, bad metadata), naming what is wrong;
// STATUS_UNSUPPORTED when the optimizer under test reported an error (a plugin's create or
// step refused; the message carries its text).
Status conform_run_case(const Optimizer* o, const char* golden_path, FILE* log, ConformSummary* sum);

// As conform_run_case, but the expected values are the outputs of the known-mistake variant
// `m` run in lockstep on the case's inputs (the golden's expect.* tensors only say which steps
// and state keys to compare); same tolerances. STATUS_UNSUPPORTED when `m` does not apply to
// this case (its hparams do not translate, or its tweak changes nothing).
Status conform_run_case_vs_mistake(const Optimizer* o, const char* golden_path, const OptimMistake* m, FILE* log,
                                   ConformSummary* sum);

// Runs the variant of mistake `m` itself against the golden (tests: every mistake must fail).
Status conform_run_mistake(const OptimMistake* m, const char* golden_path, FILE* log, ConformSummary* sum);

// The folder holding <optimizer>/<case>.safetensors: set by conform_set_golden_dir (--goldens),
// else GOLDEN_OPTIM_DIR under the working directory, else the one beside the executable.
const char* conform_golden_dir(void);
void conform_set_golden_dir(const char* dir);

// Lists the golden files of an optimizer (sorted); *n = 0 when there are none.
Status conform_list_cases(const char* optim_name, char*** paths, size_t* n);
void conform_free_list(char** paths, size_t n);

// ---- external optimizers (src/validate/trainbench_plugin.h) ----
typedef struct {
    char name[128];        // the plugin's name
    char implements[64];   // what it says it implements
    unsigned abi_version;
} ConformPluginInfo;

// dlopens `path`, finds trainbench_optimizer_plugin, checks the ABI version and returns an
// Optimizer that runs the plugin, named `optim_name` (NULL: the plugin's `implements`), which
// must be a registered optimizer: its defaults/validate resolve the case's hparams and its
// goldens and tolerances apply. STATUS_INVALID with the reason (dlerror text, missing symbol,
// ABI versions, unknown name). One plugin per process: the wrapper keeps it in statics.
Status conform_plugin_load(const char* path, const char* optim_name, const Optimizer** out, ConformPluginInfo* info);

// The reader of what a case's child process sends back through its pipe (the plugin ran in
// that child, so the bytes are untrusted), exposed for tests/fuzz/fuzz_plugin_result.c: the
// most bytes a child sends, and the table row `conform` prints for `n` bytes received and the
// child's wait status (strings cut at their buffers, fields checked). Not a stable format.
size_t conform_child_bytes_max(void);
void conform_describe_child_bytes(const void* bytes, size_t n, int wait_status, char* line, size_t cap);

#endif
