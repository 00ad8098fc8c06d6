// info.h — the machine description of `trainbench info --json` (defined in info.c), shared with
// `trainbench record`, which stores it as machine.json of a result folder.
#ifndef TRAINBENCH_INFO_H
#define TRAINBENCH_INFO_H

#include <jansson.h>

// New JSON object (caller owns it): CPU, ISA features, memory, OS, compiler, threads,
// kernel-relevant environment variables and every GEMM backend's dtype support.
json_t* info_collect(int threads);

#endif
