// cpu.h — run-time CPU feature detection (cpuid + xgetbv, so a feature counts only when the
// OS also saves its registers) and the CPU model string. Other machines differ: nothing in the
// build assumes a feature; code paths are chosen from this at run time.
#ifndef TRAINBENCH_CPU_H
#define TRAINBENCH_CPU_H

#include <stdbool.h>

typedef struct {
    bool intel;  // cpuid vendor "GenuineIntel" (libraries such as MKL pick kernels by vendor)
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512_bf16, avx512_fp16;
    bool amx_tile, amx_bf16, amx_int8, amx_fp16;
} CpuFeatures;

const CpuFeatures* cpu_features(void);
// "AMD EPYC 9B45" etc. from /proc/cpuinfo or the cpuid brand string; never NULL.
const char* cpu_model_name(void);
int cpu_logical_cores(void);

#endif
