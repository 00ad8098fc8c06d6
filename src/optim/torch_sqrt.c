// torch_sqrt.c — the rsqrtps table behind torch_sqrtf (see torch_sqrt.h).
#include "optim/torch_sqrt.h"

#include <pthread.h>

#include "core/common.h"
#include "core/cpu.h"

#include <stdio.h>
#include <stdlib.h>

static const char RSQRT_DIFFS[] =
    "555455565554555655545555555455565554555655545555555455555554555655545555555455555554555555545555"
    "555455555554555555545554555455555455545654555455545554565455545554555455545554555455545554555455"
    "545554555455545554555455545554555455545454555455545554545455545551545545515455465154554551545545"
    "515455455154554551545545515455455154554551545544515455455154554551545544515455455154554451545545"
    "514545455145454651454545514545455145454551454545514545455145454551454545514545445145454551454545"
    "514545445145454551454544514545461454514514545145145451461454514514545145145451451454514514545145"
    "145451451454514514545145145451451454514514545144145451451454514545144514451445154514451445144515"
    "451445144514451545144514451445144514451445144515451445144514451445144514451445144514451445144514"
    "144451451444514514445145144451451444514414445145144451451444514414445145144451441444514514445144"
    "144451451444514414445144144451451114445111144451111444521114445111144451111444511114445111144451"
    "111444511114445111144451111444511114445011144451111444511114445044444445444444454444444444444445"
    "444444444444444544444444444444454444444444444445444444444444444444444445444444444444444444444445"
    "111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111"
    "111111101111111111111111111111111110444511104444111044451110444511104444111044451110444411104445"
    "111044441110444511104444111044451110444411104444111044451110444444111104441111044411110444111105"
    "441111044411110444111104441111044411110444111104441111044411110444111104441111044411110444111105"
    "104411111044111110441110104411111044111110441111104411111044111010441111104411111044111010441111"
    "104411111044111010441111104411101104410511044104110441051104410411044105110441041104410511044104"
    "110441041104410511044104110441041104410511044104110441041104410510441104104411041044110410441104"
    "104411041044110410441105104411041044110410441104104411041044110410441104104411041044110410441104"
    "041104110411041104110411041104110411041004110411041104110411041104110411041104100411041104110411"
    "041104110411041004110411041104114514514545145145451451464514514545145144451451454514514545145145"
    "451451454514514445145145451451454514514445145145451451444514514514451451144514511445145214451451"
    "144514511445145114451451144514511445145014451451144514511445145114451450144514511445145014451451"
    "144451121444511114445111144451121444511114445111144451111444511114445111144451111444511114445111"
    "144451111444511114445111144451111444444414444445144444451444444414444445144444441444444514444444"
    "144444441444444514444444144444441444444514444444144444441444444411111111111111111111111111111111"
    "111111111111111111111111111111111111111111111110111111111111111111111110111111111111111011111111"
    "411111044111110541111104411111054111110441111104411111054111110441111104411111044111110541111104"
    "411111044111110441111104411111041104441111044411110444111104441111044411110444111104441111044410"
    "110444111104441111044411110444101104441111044411110444101104441111044110110441111104411011044111"
    "110441101104411111044110110441101104411111044110110441101104411111044110110441101104411011044111"
    "044104410441044104410441044104410441044104410441044104410441044104410441044104410441044104410441"
    "044104410441044104410440044104411041041110410411104104101041041110410411104104111041041010410411"
    "104104101041041110410411104104101041041110410410104104111041041010410410104104111041041010410411"
    "104104101041041010410411104104101041041010410411104104101041041010410410104104101041041110410410"
    "410410104104101041041010410410104104101041041010410410104104101041041010410410104104101041041010"
    "410410104104101041041010410410110410104004101041041010410410104104101041041010410410104004101041"
    "041010410410104104101040041010410410104104101040041010410410104104101040041010410410104004101041"
    "041010410410104004101041041010400410104104101040041010410410104004101041041010400410104004101041"
    "101010101010101110101010101010101010101110101010101010101010101110101010101010101010101010101011"
    "101010101010101010101010101010111010101010101010101010101010101010101010101010101010101110101010"
    "1010101010101010101010101010101010101010101010101010101010101010";
uint16_t torch_rsqrt_tab[8192 + 2];  // 12-bit mantissa of rsqrtps(x), x in [1, 4), by (parity, top 12 bits)

static void rsqrt_tab_fill(void) {
    CHECK(sizeof RSQRT_DIFFS - 1 == 4096);
    int32_t t = 4095;
    for (int i = 0; i < 8192; i++) {
        torch_rsqrt_tab[i] = (uint16_t)t;
        const int digit = RSQRT_DIFFS[i / 2] <= '9' ? RSQRT_DIFFS[i / 2] - '0' : RSQRT_DIFFS[i / 2] - 'a' + 10;
        t -= (i % 2 == 0) ? digit >> 2 : digit & 3;
    }
    CHECK(t == 0);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

void torch_sqrt_init(void) { CHECK(pthread_once(&g_once, rsqrt_tab_fill) == 0); }

#if defined(__x86_64__)

__attribute__((target("avx2"))) static bool hw_check(void) {
    // every table entry (x in [1, 4)), at several exponents, and both ends of each bucket
    static const int shifts[] = {0, 2, -2, 40, -40, 120, -120};
    for (int i = 0; i < 8192; i += 8) {
        float xs[8], want[8], got[8];
        for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++) {
            for (int low = 0; low < 2; low++) {
                for (int l = 0; l < 8; l++) {
                    int idx = i + l;
                    uint32_t b = ((uint32_t)(127 + (idx >> 12) + shifts[k]) << 23) | ((uint32_t)(idx & 0xFFF) << 11) |
                                 (low ? 0x7FFu : 0u);
                    memcpy(&xs[l], &b, 4);
                    want[l] = torch_sqrtf(xs[l]);
                }
                _mm256_storeu_ps(got, torch_sqrt8_avx2(_mm256_loadu_ps(xs), true));
                if (memcmp(got, want, sizeof got) != 0) return false;
            }
        }
    }
    return true;
}

static bool g_hw_ok, g_vector_ok;
static pthread_once_t g_hw_once = PTHREAD_ONCE_INIT;
static void hw_init(void) {
    torch_sqrt_init();
    g_vector_ok = cpu_features()->avx2 && cpu_features()->fma;
    g_hw_ok = g_vector_ok && hw_check();
}

static bool g_force_portable, g_force_table;
void torch_sqrt_force_portable(bool on) { g_force_portable = on; }
void torch_sqrt_force_table(bool on) { g_force_table = on; }

bool torch_sqrt_hw_matches(void) {
    CHECK(pthread_once(&g_hw_once, hw_init) == 0);
    return g_hw_ok && !g_force_portable && !g_force_table;
}

bool torch_sqrt_vector(void) {
    CHECK(pthread_once(&g_hw_once, hw_init) == 0);
    return g_vector_ok && !g_force_portable && g_torch_sqrt_kernel == TORCH_SQRT_MKL_SSE;
}

bool torch_sqrt_vector_mkl_avx512(void) {
    return !g_force_portable && g_torch_sqrt_kernel == TORCH_SQRT_MKL_AVX512 && cpu_features()->avx512f;
}

// MKL's AVX-512 sqrt kernel as measured on an Intel Xeon (torch 2.15, MKL 2024.2): identical to
// torch.sqrt on all 2^24 floats of [1, 4) and 4 M random bit patterns of every class.
__attribute__((target("avx512f,fma"))) float torch_sqrtf_mkl_avx512(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if (b == 0 || b == 0x80000000u) return x;  // +-0 as they are
    if (b >= 0x7F800000u) return sqrtf(x);     // inf, NaN and every negative
    // below 2^-63 the residual x - s*s would be subnormal: scaled by 2^64 (exact) and back by 2^-32
    const bool tiny = (b >> 23) < 64;
    const __m128 vx = _mm_set_ss(tiny ? x * 0x1p64f : x);
    const __m128 y = _mm_rsqrt14_ss(vx, vx);
    const __m128 s = _mm_mul_ss(vx, y), h = _mm_mul_ss(y, _mm_set_ss(0.5f));
    const __m128 d = _mm_fnmadd_ss(s, s, vx);  // x - s*s, one rounding
    const float r = _mm_cvtss_f32(_mm_fmadd_ss(d, h, s));
    return tiny ? r * 0x1p-32f : r;
}

bool torch_sqrt_set_kernel(TorchSqrtKernel k) {
    if (k == TORCH_SQRT_MKL_AVX512 && !cpu_features()->avx512f) return false;
    g_torch_sqrt_kernel = k;
    return true;
}
#else
void torch_sqrt_force_portable(bool on) { (void)on; }
void torch_sqrt_force_table(bool on) { (void)on; }
bool torch_sqrt_hw_matches(void) { return false; }
bool torch_sqrt_vector(void) { return false; }
bool torch_sqrt_vector_mkl_avx512(void) { return false; }
float torch_sqrtf_mkl_avx512(float x) { return sqrtf(x); }  // never selected: the setter refuses
bool torch_sqrt_set_kernel(TorchSqrtKernel k) {
    if (k != TORCH_SQRT_MKL_SSE) return false;
    g_torch_sqrt_kernel = k;
    return true;
}
#endif

TorchSqrtKernel g_torch_sqrt_kernel = TORCH_SQRT_MKL_SSE;

const char* torch_sqrt_kernel_name(TorchSqrtKernel k) {
    return k == TORCH_SQRT_MKL_AVX512 ? "mkl-avx512" : "mkl-sse";
}

bool torch_sqrt_apply_env(char* err, size_t cap) {
    const char* v = getenv("TRAINBENCH_TORCH_SQRT");
    if (!v || !*v) return true;
    TorchSqrtKernel k;
    if (!strcmp(v, "auto")) {
        k = cpu_features()->intel && cpu_features()->avx512f ? TORCH_SQRT_MKL_AVX512 : TORCH_SQRT_MKL_SSE;
    } else if (!torch_sqrt_kernel_parse(v, &k)) {
        snprintf(err, cap, "TRAINBENCH_TORCH_SQRT='%.40s' is not a kernel (allowed: mkl-sse, mkl-avx512, auto)", v);
        return false;
    }
    if (!torch_sqrt_set_kernel(k)) {
        snprintf(err, cap, "TRAINBENCH_TORCH_SQRT=mkl-avx512 needs AVX-512F (vrsqrt14ps), which this CPU lacks");
        return false;
    }
    return true;
}

bool torch_sqrt_kernel_parse(const char* s, TorchSqrtKernel* out) {
    if (!strcmp(s, "mkl-sse")) *out = TORCH_SQRT_MKL_SSE;
    else if (!strcmp(s, "mkl-avx512")) *out = TORCH_SQRT_MKL_AVX512;
    else return false;
    return true;
}
