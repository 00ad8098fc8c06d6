// conform.h — runs an optimizer golden case (reference/golden/optim/<optim>/<case>.safetensors,
// format in reference/README.md) through an Optimizer and compares params and every state
// tensor the library kept, at each checked step, with the tolerance of that optimizer/tensor.
// Used by tests/test_optim.c (and later by `trainbench conform`).
#ifndef TRAINBENCH_CONFORM_H
#define TRAINBENCH_CONFORM_H

#include <stdio.h>

#include "compare.h"
#include "optim.h"

#define GOLDEN_OPTIM_DIR "reference/golden/optim"

typedef struct {
    double atol, rtol;          // floats: |x - ref| <= atol + rtol*|ref| + move_k*moved
    double move_k;              // times the element's cumulative |delta p| over the steps so far
    double min_code_equal;      // uint8 codes: fraction identical required
    int max_code_dist;          // uint8 codes: max distance allowed
    const char* why;            // the justification printed with the result
} Tolerance;

// The tolerance for one optimizer's tensor ("param", or a state key such as "exp_avg").
Tolerance conform_tolerance(const char* optim_name, const char* tensor);

typedef struct {
    size_t n_compared, n_failed;  // tensor comparisons
    double worst_used;            // max share of tolerance used over all float comparisons
    uint32_t worst_ulp_param;     // max ulp distance of params over all checked steps
    double min_code_equal;        // min fraction of identical codes (1 if no codes)
    int max_code_dist;
} ConformSummary;

// Runs one case. Each comparison prints one line to `log` (NULL: silent). STATUS_INVALID if
// the golden file is unusable (missing tensors, bad metadata), naming what is wrong.
Status conform_run_case(const Optimizer* o, const char* golden_path, FILE* log, ConformSummary* sum);

// Lists the golden files of an optimizer (sorted); *n = 0 when there are none.
Status conform_list_cases(const char* optim_name, char*** paths, size_t* n);
void conform_free_list(char** paths, size_t n);

#endif
