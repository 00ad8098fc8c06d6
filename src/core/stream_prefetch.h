// stream_prefetch.h — software prefetch for long sequential read streams (the optimizers'
// passes over 40 MB tensors), with a per-process policy because the two machines we measured
// want different things (README "The Adafactors' passes", sixth and ninth rounds):
// - pages (Intel Xeon): a core's hardware streamer follows a stream only within a 4 KiB page
//   and restarts in each new one, so a single sequential stream keeps few misses in flight: one
//   thread read 40 MB at 7.6-10 GB/s with plain loads and at 11-13 GB/s when, on entering each
//   page, it touched the first two lines of each of the next STREAM_PAGES_AHEAD pages
//   (prefetch to L2; 2 threads, one stream each: 17 -> 21-25 GB/s);
// - lines (AMD EPYC, Zen 4): that page kick made transformers Adafactor's step slower (1.06-1.09x
//   of the step without any prefetch); what a one-thread norm chain lacks there is memory-level
//   parallelism (the chain's addition latency paces the loop, the out-of-order window holds ~1 KiB
//   of loads ahead), and prefetching every line STREAM_LINE_AHEAD bytes ahead into L2 gives it,
//   in the Adafactors' per-vector loops (chains and streaming passes alike), while at the start of
//   a run of a compiler-vectorized two-stream loop the page kick still helps a little (0.97-0.98x
//   of none) and a burst of a page's lines hurts (1.10x).
// The policy is chosen by CPU vendor before main (Intel: pages; others: lines);
// TRAINBENCH_STREAM_PREFETCH=pages|lines|none|auto overrides it at start (the CLI and the benchmark
// binary). Prefetching changes no value; addresses past the end of an array are harmless
// (prefetches do not fault).
#ifndef TRAINBENCH_STREAM_PREFETCH_H
#define TRAINBENCH_STREAM_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { STREAM_PAGE_BYTES = 4096, STREAM_PAGES_AHEAD = 4, STREAM_LINE_BYTES = 64, STREAM_LINE_AHEAD = 4096 };

typedef enum { STREAM_PREFETCH_NONE = 0, STREAM_PREFETCH_PAGES = 1, STREAM_PREFETCH_LINES = 2 } StreamPrefetch;

// The policy in force: set before main and at start-up, before any thread reads a stream.
extern StreamPrefetch stream_prefetch_policy;
// "pages", "lines" or "none"
const char* stream_prefetch_name(StreamPrefetch p);
// Sets the policy (tests and experiments; not while a step runs).
void stream_prefetch_set(StreamPrefetch p);
// This CPU's default: pages on Intel, lines elsewhere (what the process starts with).
StreamPrefetch stream_prefetch_default(void);
// TRAINBENCH_STREAM_PREFETCH=pages|lines|none|auto, once, at start (optim_apply_env, from the CLI's
// and the benchmark binary's main); false with a message in err when the value is none of those.
bool stream_prefetch_apply_env(char* err, size_t cap);

// The page kick: when [x, x + bytes) holds the start of a page, the first two lines of each of
// the STREAM_PAGES_AHEAD pages after it are prefetched (to L2).
static inline __attribute__((always_inline)) void stream_prefetch_kick(uintptr_t a, uintptr_t last) {
    const uintptr_t page = (a + STREAM_PAGE_BYTES - 1) & ~(uintptr_t)(STREAM_PAGE_BYTES - 1);
    if (page > last) return;
    // addresses formed as integers: past the end of the array they are no pointer arithmetic
    for (uintptr_t k = 1; k <= STREAM_PAGES_AHEAD; k++) {
        __builtin_prefetch((const void*)(page + k * STREAM_PAGE_BYTES), 0, 2);
        __builtin_prefetch((const void*)(page + k * STREAM_PAGE_BYTES + 64), 0, 2);
    }
}

// For a loop that reads its stream a vector at a time: called once per piece it is about to
// read ([x, x + bytes), bytes >= 1, e.g. one vector of 8 floats). pages: the page kick; lines:
// every line that starts in the piece has the line STREAM_LINE_AHEAD bytes on prefetched into L2
// (into L1 instead, the steps were 1.10-1.12x slower: the L1's few fill buffers are the limit).
static inline __attribute__((always_inline)) void stream_prefetch_span(const void* x, size_t bytes) {
    const StreamPrefetch pol = stream_prefetch_policy;
    const uintptr_t a = (uintptr_t)x, last = a + bytes - 1;
    if (pol == STREAM_PREFETCH_LINES) {
        for (uintptr_t l = (a + STREAM_LINE_BYTES - 1) & ~(uintptr_t)(STREAM_LINE_BYTES - 1); l <= last;
             l += STREAM_LINE_BYTES)
            __builtin_prefetch((const void*)(l + STREAM_LINE_AHEAD), 0, 2);  // to L2 (prefetcht1)
    } else if (pol == STREAM_PREFETCH_PAGES) {
        stream_prefetch_kick(a, last);
    }
}

// For a loop that reads its streams in runs of up to a page (a compiler-vectorized body with no
// room for a prefetch per line): called at each run's start with the run's bytes. The page kick
// under both policies (none: nothing).
static inline __attribute__((always_inline)) void stream_prefetch_run(const void* x, size_t bytes) {
    if (stream_prefetch_policy != STREAM_PREFETCH_NONE) stream_prefetch_kick((uintptr_t)x, (uintptr_t)x + bytes - 1);
}

#endif
