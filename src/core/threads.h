// threads.h — the process's threading configuration: one OpenMP runtime (libgomp) shared by our
// loops, oneDNN and OpenBLAS (linked against Debian's OpenMP build of OpenBLAS), and its wait
// policy, chosen deliberately: passive (an idle worker sleeps on a futex instead of spinning).
// libgomp reads OMP_WAIT_POLICY once, when it is loaded, before main runs, so the policy is
// applied by re-executing the program once with it set. Measured on 2 shared vCPUs (load ~9,
// small bf16 step, interleaved runs): libgomp's default spin 1.58 s median step, GOMP_SPINCOUNT
// =10000 0.70 s, passive 0.13 s (README "Threads and contention").
// Not here: thread counts (each command's --threads), which kernels run (cpu.h).
#ifndef TRAINBENCH_THREADS_H
#define TRAINBENCH_THREADS_H

// When the environment sets neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: sets
// OMP_WAIT_POLICY=passive and re-executes /proc/self/exe with argv (once; returns only when the
// environment already chose, or the re-exec failed, which leaves the runtime's default).
// A user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT always wins.
void threads_apply_wait_policy(char** argv);

// "passive (trainbench default)", "active (environment)", "GOMP_SPINCOUNT=N (environment)" or
// "runtime default (spin, then sleep)": what the running OpenMP runtime was started with.
const char* threads_wait_policy(void);

// The file the OpenMP runtime was loaded from (e.g. /lib/x86_64-linux-gnu/libgomp.so.1), or
// "unknown".
const char* threads_openmp_runtime(void);

#endif
