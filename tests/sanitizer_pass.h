// sanitizer_pass.h — SANITIZER_PASS is 1 in the ASan+UBSan build, `make test`'s second pass.
// That pass exists to catch memory and undefined-behaviour errors, on every code path the tests
// reach; it runs about 10x slower than the plain pass. Where a test repeats one code path many
// times for numerical coverage (a 66-M-parameter model, every case of a long list, every backend
// of one comparison), the sanitizer pass takes a smaller sample of the same paths and says so in
// its output (sanitizer_pass_note); the plain pass always runs everything, and every assertion
// stays in both passes. README "Tests" lists each reduction.
#ifndef TRAINBENCH_TESTS_SANITIZER_PASS_H
#define TRAINBENCH_TESTS_SANITIZER_PASS_H

#include <stdio.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZER_PASS 1
#else
#define SANITIZER_PASS 0
#endif

// "ASan pass: <what> (the plain pass runs it all)"; nothing in the plain pass.
static inline void sanitizer_pass_note(const char* what) {
    if (SANITIZER_PASS) printf("ASan pass: %s (the plain pass runs it all)\n", what);
}

#endif
