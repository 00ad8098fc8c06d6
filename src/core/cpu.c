// cpu.c — implementation of cpu.h (x86-64 cpuid; other architectures report no features).
#include "core/cpu.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HAVE_X86 1
#endif

static CpuFeatures g_features;
static char g_model[128] = "unknown";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef HAVE_X86
static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

static void detect(void) {
#ifdef HAVE_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = (c >> 27) & 1;
    bool avx = (c >> 28) & 1;
    bool fma = (c >> 12) & 1;
    bool f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;                  // XMM + YMM state
    bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;   // opmask + ZMM state
    bool os_amx = (xcr0 & 0x60000) == 0x60000;          // XTILECFG + XTILEDATA
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d7);
        unsigned b71, c71, d71;
        __cpuid_count(7, 1, a71, b71, c71, d71);
    }
    CpuFeatures* f = &g_features;
    unsigned vb, vc, vd;
    __cpuid(0, a, vb, vc, vd);
    f->intel = vb == 0x756e6547u && vd == 0x49656e69u && vc == 0x6c65746eu;  // "Genu" "ineI" "ntel"
    f->fma = os_avx && avx && fma;
    f->f16c = os_avx && avx && f16c;
    f->avx2 = os_avx && avx && ((b7 >> 5) & 1);
    f->avx512f = os_avx512 && ((b7 >> 16) & 1);
    f->avx512bw = f->avx512f && ((b7 >> 30) & 1);
    f->avx512vl = f->avx512f && ((b7 >> 31) & 1);
    f->avx512dq = f->avx512f && ((b7 >> 17) & 1);
    f->avx512_bf16 = f->avx512f && ((a71 >> 5) & 1);
    f->avx512_fp16 = f->avx512f && ((d7 >> 23) & 1);
    f->amx_bf16 = os_amx && ((d7 >> 22) & 1);
    f->amx_tile = os_amx && ((d7 >> 24) & 1);
    f->amx_int8 = os_amx && ((d7 >> 25) & 1);
    f->amx_fp16 = os_amx && ((a71 >> 21) & 1);
    (void)c7;
#endif
    FILE* fp = fopen("/proc/cpuinfo", "r");
    if (fp) {
        char line[512];
        while (fgets(line, sizeof line, fp)) {
            if (strncmp(line, "model name", 10) == 0) {
                char* colon = strchr(line, ':');
                if (colon) {
                    colon++;
                    while (*colon == ' ' || *colon == '\t') colon++;
                    size_t n = strcspn(colon, "\n");
                    if (n >= sizeof g_model) n = sizeof g_model - 1;
                    memcpy(g_model, colon, n);
                    g_model[n] = 0;
                }
                break;
            }
        }
        fclose(fp);
    }
}

const CpuFeatures* cpu_features(void) {
    pthread_once(&g_once, detect);
    return &g_features;
}

const char* cpu_model_name(void) {
    pthread_once(&g_once, detect);
    return g_model;
}

int cpu_logical_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
