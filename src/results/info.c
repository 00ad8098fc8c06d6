// info.c — `trainbench info`: what this machine is and what each GEMM backend can do on it.
// The --json form is the machine description that result folders store as machine.json.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "core/cli.h"
#include "core/common.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/stream_prefetch.h"
#include "core/threads.h"
#include "gemm/gemm.h"
#include "model/layers.h"
#include "optim/torch_sqrt.h"

// Environment variables that change which kernels run or how many threads they use.
static const char* const KERNEL_ENV_VARS[] = {
    "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",   "GOMP_SPINCOUNT",       "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
    "ONEDNN_VERBOSE",    "DNNL_VERBOSE",         "TRAINBENCH_TORCH_SQRT", "TRAINBENCH_STREAM_PREFETCH",
};

static const DType GEMM_DTYPES[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};

static long mem_total_bytes(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static json_t* features_json(const CpuFeatures* f) {
    json_t* o = json_object();
    json_object_set_new(o, "avx2", json_boolean(f->avx2));
    json_object_set_new(o, "fma", json_boolean(f->fma));
    json_object_set_new(o, "f16c", json_boolean(f->f16c));
    json_object_set_new(o, "avx512f", json_boolean(f->avx512f));
    json_object_set_new(o, "avx512bw", json_boolean(f->avx512bw));
    json_object_set_new(o, "avx512vl", json_boolean(f->avx512vl));
    json_object_set_new(o, "avx512dq", json_boolean(f->avx512dq));
    json_object_set_new(o, "avx512_bf16", json_boolean(f->avx512_bf16));
    json_object_set_new(o, "avx512_fp16", json_boolean(f->avx512_fp16));
    json_object_set_new(o, "amx_tile", json_boolean(f->amx_tile));
    json_object_set_new(o, "amx_bf16", json_boolean(f->amx_bf16));
    json_object_set_new(o, "amx_int8", json_boolean(f->amx_int8));
    json_object_set_new(o, "amx_fp16", json_boolean(f->amx_fp16));
    return o;
}

// Builds the whole description; `threads` is the thread count the backends were opened with.
json_t* info_collect(int threads) {
    json_t* root = json_object();
    json_object_set_new(root, "trainbench_version", json_string(TRAINBENCH_VERSION));
    json_t* cpu = json_object();
    json_object_set_new(cpu, "model", json_string(cpu_model_name()));
    json_object_set_new(cpu, "logical_cores", json_integer(cpu_logical_cores()));
    json_object_set_new(cpu, "features", features_json(cpu_features()));
    json_object_set_new(root, "cpu", cpu);
    json_object_set_new(root, "memory_bytes", json_integer(mem_total_bytes()));
    struct utsname u;
    if (uname(&u) == 0) {
        char os[512];
        snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
        json_object_set_new(root, "os", json_string(os));
        json_object_set_new(root, "hostname", json_string(u.nodename));
    }
    json_object_set_new(root, "compiler", json_string("gcc " __VERSION__));
    json_object_set_new(root, "threads", json_integer(threads));
    json_t* omp = json_object();  // one runtime for our loops, oneDNN and OpenBLAS (threads.h)
    json_object_set_new(omp, "runtime", json_string(threads_openmp_runtime()));
    json_object_set_new(omp, "wait_policy", json_string(threads_wait_policy()));
    json_object_set_new(root, "openmp", omp);
    json_object_set_new(root, "convert_impl", json_string(convert_impl_name(convert_impl_active())));
    // torch.sqrt's MKL kernel our optimizers reproduce (torch_sqrt.h) and how they compute it here
    json_t* sq = json_object();
    json_object_set_new(sq, "kernel", json_string(torch_sqrt_kernel_name(g_torch_sqrt_kernel)));
    const bool mkl512 = g_torch_sqrt_kernel == TORCH_SQRT_MKL_AVX512;
    json_object_set_new(sq, "path",
                        json_string(mkl512 ? (cpu_features()->avx512vl && cpu_features()->avx512bw
                                                  ? "vector (vrsqrt14ps)"
                                              : cpu_features()->avx512vl ? "adamw_torch vector (vrsqrt14ps), "
                                                                           "adamw_bnb_8bit scalar"
                                              : cpu_features()->avx512bw ? "adamw_torch scalar, "
                                                                           "adamw_bnb_8bit vector (vrsqrt14ps)"
                                                                         : "scalar")
                                    : !torch_sqrt_vector()    ? "scalar"
                                    : torch_sqrt_hw_matches() ? "vector, rsqrtps seed"
                                                              : "vector, table seed gathered"));
    json_object_set_new(root, "torch_sqrt", sq);
    // the optimizers' one-thread streams: software prefetch policy (stream_prefetch.h)
    json_object_set_new(root, "stream_prefetch", json_string(stream_prefetch_name(stream_prefetch_policy)));
    // torch's fp32 GELU is oneDNN's eltwise_gelu_erf, whose forward depends on the ISA (layers.c)
    json_object_set_new(root, "gelu_fp32",
                        json_string(layers_gelu_f32_minimax() ? "oneDNN's AVX-512 minimax forward"
                                                              : "oneDNN's Abramowitz-Stegun forward"));
    json_t* env = json_object();
    for (size_t i = 0; i < ARRAY_LEN(KERNEL_ENV_VARS); i++) {
        const char* v = getenv(KERNEL_ENV_VARS[i]);
        json_object_set_new(env, KERNEL_ENV_VARS[i], v ? json_string(v) : json_null());
    }
    json_object_set_new(root, "environment", env);

    json_t* backends = json_array();
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        const GemmBackend* be = gemm_backend_at(b);
        json_t* o = json_object();
        json_object_set_new(o, "name", json_string(be->name));
        json_object_set_new(o, "description", json_string(be->description));
        json_t* lib = json_object();
        if (be->library_info) {
            GemmInfoItem items[16];
            int n = be->library_info(items, 16);
            for (int i = 0; i < n; i++) json_object_set_new(lib, items[i].key, json_string(items[i].value));
        }
        json_object_set_new(o, "library", lib);
        json_t* combos = json_array();
        for (size_t d = 0; d < ARRAY_LEN(GEMM_DTYPES); d++) {
            DType ab = GEMM_DTYPES[d];
            DType outs[2] = {DTYPE_F32, ab};
            for (int k = 0; k < (ab == DTYPE_F32 ? 1 : 2); k++) {
                char why[256] = "";
                GemmSupport s = be->supports(ab, outs[k], why, sizeof why);
                json_t* c = json_object();
                json_object_set_new(c, "ab_dtype", json_string(dtype_name(ab)));
                json_object_set_new(c, "c_dtype", json_string(dtype_name(outs[k])));
                json_object_set_new(c, "support", json_string(gemm_support_name(s)));
                json_object_set_new(c, "why", json_string(why));
                json_array_append_new(combos, c);
            }
        }
        json_object_set_new(o, "dtypes", combos);
        json_array_append_new(backends, o);
    }
    json_object_set_new(root, "backends", backends);
    return root;
}

static void print_human(json_t* root) {
    json_t* cpu = json_object_get(root, "cpu");
    printf("trainbench %s\n", json_string_value(json_object_get(root, "trainbench_version")));
    printf("CPU:        %s (%lld logical cores)\n", json_string_value(json_object_get(cpu, "model")),
           json_integer_value(json_object_get(cpu, "logical_cores")));
    printf("ISA:       ");
    const char* key;
    json_t* val;
    json_object_foreach(json_object_get(cpu, "features"), key, val)
        printf(" %s%s", json_is_true(val) ? "+" : "-", key);
    printf("\nMemory:     %.1f GiB\n", (double)json_integer_value(json_object_get(root, "memory_bytes")) / (1 << 30));
    printf("OS:         %s\n", json_string_value(json_object_get(root, "os")));
    printf("Compiler:   %s\n", json_string_value(json_object_get(root, "compiler")));
    printf("Threads:    %lld\n", json_integer_value(json_object_get(root, "threads")));
    json_t* omp = json_object_get(root, "openmp");
    printf("OpenMP:     %s, wait policy %s\n", json_string_value(json_object_get(omp, "runtime")),
           json_string_value(json_object_get(omp, "wait_policy")));
    printf("fp16/bf16 row converters: %s\n", json_string_value(json_object_get(root, "convert_impl")));
    json_t* sq = json_object_get(root, "torch_sqrt");
    printf("torch.sqrt: MKL's %s kernel (%s; TRAINBENCH_TORCH_SQRT=mkl-sse|mkl-avx512|auto)\n",
           json_string_value(json_object_get(sq, "kernel")), json_string_value(json_object_get(sq, "path")));
    printf("Stream prefetch: %s (TRAINBENCH_STREAM_PREFETCH=pages|lines|none|auto; this CPU's default: %s)\n",
           json_string_value(json_object_get(root, "stream_prefetch")), stream_prefetch_name(stream_prefetch_default()));
    printf("fp32 GELU:  %s, its Abramowitz-Stegun derivative (as torch runs it on this CPU)\n",
           json_string_value(json_object_get(root, "gelu_fp32")));
    printf("Environment (kernel-relevant):\n");
    json_object_foreach(json_object_get(root, "environment"), key, val)
        printf("  %-26s %s\n", key, json_is_null(val) ? "(unset)" : json_string_value(val));
    printf("\nGEMM backends (inputs -> output: support)\n");
    size_t i;
    json_t* be;
    json_array_foreach(json_object_get(root, "backends"), i, be) {
        printf("  %-9s %s\n", json_string_value(json_object_get(be, "name")),
               json_string_value(json_object_get(be, "description")));
        json_object_foreach(json_object_get(be, "library"), key, val)
            printf("            %s: %s\n", key, json_string_value(val));
        size_t j;
        json_t* c;
        json_array_foreach(json_object_get(be, "dtypes"), j, c) {
            const char* why = json_string_value(json_object_get(c, "why"));
            char combo[32];
            snprintf(combo, sizeof combo, "%s -> %s", json_string_value(json_object_get(c, "ab_dtype")),
                     json_string_value(json_object_get(c, "c_dtype")));
            printf("            %-13s %-11s %s\n", combo, json_string_value(json_object_get(c, "support")),
                   why && *why ? why : "");
        }
    }
}

static int info_run(int argc, char** argv);

const Command cmd_info = {
    .name = "info",
    .summary = "describe this machine and what each GEMM backend supports on it",
    .usage = "trainbench info [--json] [--threads N]",
    .run = info_run,
};

static int info_run(int argc, char** argv) {
    bool as_json = false;
    long threads = cpu_logical_cores();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            as_json = true;
        } else if (flag_matches(argv[i], "--threads")) {
            if (!flag_int(&cmd_info, argc, argv, &i, "--threads", 1, 1024, &threads)) return 2;
        } else {
            return cli_unknown_flag(&cmd_info, argv[i]);
        }
    }
    json_t* root = info_collect((int)threads);
    if (as_json) {
        char* s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
    } else {
        print_human(root);
    }
    json_decref(root);
    return 0;
}
