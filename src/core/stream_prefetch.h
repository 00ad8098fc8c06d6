// stream_prefetch.h — software prefetch for one long sequential read stream per thread.
// A core's hardware streamer follows a stream only within a 4 KiB page and restarts in each new
// one, so a single sequential stream keeps few misses in flight: on the Intel Xeon of the
// README's second machine one thread read 40 MB at 7.6-10 GB/s with plain loads and at
// 11-13 GB/s when, on entering each page, it touched the first two lines of each of the next
// STREAM_PAGES_AHEAD pages (prefetch to L2; 2 threads, one stream each: 17 -> 21-25 GB/s). Our
// one-thread norm chains (torch's reduction order allows no split) are such streams.
// Prefetching changes no value; addresses past the end of an array are harmless (prefetches
// do not fault).
#ifndef TRAINBENCH_STREAM_PREFETCH_H
#define TRAINBENCH_STREAM_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

enum { STREAM_PAGE_BYTES = 4096, STREAM_PAGES_AHEAD = 4 };

// Called once per piece a loop is about to read ([x, x + bytes), bytes >= 1, e.g. one vector):
// when the piece holds the start of a page, the STREAM_PAGES_AHEAD pages after that one are
// kicked off. Cheap enough to call once per vector of 8 floats.
static inline __attribute__((always_inline)) void stream_prefetch_span(const void* x, size_t bytes) {
    const uintptr_t a = (uintptr_t)x, page = (a + STREAM_PAGE_BYTES - 1) & ~(uintptr_t)(STREAM_PAGE_BYTES - 1);
    if (page > a + bytes - 1) return;
    // addresses formed as integers: past the end of the array they are no pointer arithmetic
    for (uintptr_t k = 1; k <= STREAM_PAGES_AHEAD; k++) {
        __builtin_prefetch((const void*)(page + k * STREAM_PAGE_BYTES), 0, 2);
        __builtin_prefetch((const void*)(page + k * STREAM_PAGE_BYTES + 64), 0, 2);
    }
}

#endif
