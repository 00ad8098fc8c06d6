// threads.h — the process's threading configuration: one OpenMP runtime (libgomp) shared by our
// loops, oneDNN and OpenBLAS (linked against Debian's OpenMP build of OpenBLAS), and its wait
// policy, chosen deliberately: a short spin, GOMP_SPINCOUNT=1000 (an idle worker polls ~1000
// times, a few microseconds, then sleeps on a futex), between passive (sleep at once: every
// parallel region then pays a futex wake, which on this VM cost the small bf16 step 1.28x on an
// idle machine) and libgomp's default spin of 300,000 (which collapses as soon as another process
// wants the cores: 2.5x with one busy loop here, 12x under load ~9). libgomp reads its
// environment once, when it is loaded, before main runs, so the policy is applied by
// re-executing the program once with it set. Measurements: README "Threads and contention".
// Not here: thread counts (each command's --threads), which kernels run (cpu.h).
#ifndef TRAINBENCH_THREADS_H
#define TRAINBENCH_THREADS_H

#define THREADS_SPINCOUNT "1000"

// When the environment sets neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: sets
// GOMP_SPINCOUNT=THREADS_SPINCOUNT and re-executes /proc/self/exe with argv (once; returns only when the
// environment already chose, or the re-exec failed, which leaves the runtime's default).
// A user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT always wins.
void threads_apply_wait_policy(char** argv);

// "GOMP_SPINCOUNT=1000 (trainbench default)", "passive (environment)", "GOMP_SPINCOUNT=N (environment)" or
// "runtime default (spin, then sleep)": what the running OpenMP runtime was started with.
const char* threads_wait_policy(void);

// The file the OpenMP runtime was loaded from (e.g. /lib/x86_64-linux-gnu/libgomp.so.1), or
// "unknown".
const char* threads_openmp_runtime(void);

#endif
