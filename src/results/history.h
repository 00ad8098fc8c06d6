// history.h — the results history: result folders stored in one SQLite database (default
// results/history.sqlite), grouped by machine class, for trends, baselines and change points.
// Not here: reading the folders (results.h), the gate's verdicts (gate.c).
//
// Schema version 1 (PRAGMA user_version = 1; PRAGMA application_id = 0x54424831, "TBH1", so a
// foreign SQLite file is refused):
//   runs(id INTEGER PRIMARY KEY, run_dir TEXT UNIQUE, machine_class, instance_id, run_id,
//        commit_sha, date, label, added)                       one row per result folder
//   samples(run, bench, rep, real_time_s, counters JSON)        every repetition of bench.json
//   bench_errors(run, bench, message)                           failed/unsupported benchmarks
//   conform(run, case_id, ok, detail)                           conform.json
//   memory(run, model, optimizer, variant, estimate_bytes, measured_bytes)   memory.json
// Each `history add` of a folder is one IMMEDIATE transaction (concurrent writers wait up to
// 30 s for each other; a folder already stored is skipped).
#ifndef TRAINBENCH_HISTORY_H
#define TRAINBENCH_HISTORY_H

#include <stddef.h>

#include "results/results.h"

#define HISTORY_DEFAULT_DB "results/history.sqlite"
#define HISTORY_SCHEMA_VERSION 1

// Baseline for `gate --baseline history:N`: every repetition of the last n runs (by date) of
// `machine_class` in the database, except the run stored from `exclude_dir` (the candidate
// itself, when it was added), as a BenchFile. *used gets how many runs went in.
Status history_baseline(const char* db_path, const char* machine_class, int n, const char* exclude_dir,
                        BenchFile* out, int* used);

// Change points of a sequence (per-run medians in run order) by binary segmentation: the best
// split of a segment (least sum of squared deviations from the two parts' means, each part at
// least 3 values) is kept when the Gaussian likelihood ratio with unknown variance,
// m ln(RSS_segment / RSS_split) for a segment of m values, exceeds the BIC-style penalty
// 3 ln(n) (n: the whole sequence); the parts are then split the same way. Measured on
// constructed histories (tests/test_history.c, 1000 seeded draws each, Gaussian noise): a step
// of 3x the noise with 5 runs on each side is found in 97% and placed exactly at the first
// changed run in 82%; a flat history of 50 runs gives a change point in 1.3%. Writes the
// indexes where a new level starts (x[at] is the first value after the step), ascending, into
// at[0..max) and returns how many.
size_t history_change_points(const double* x, size_t n, size_t* at, size_t max);

#endif
