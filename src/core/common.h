// common.h — error handling tiers, checked allocation and file helpers, Status values,
// logging, number parsing and atomic file writes shared by every module.
// Not here: anything numerical (dtype.h), anything about tensors (safetensors.h).
#ifndef TRAINBENCH_COMMON_H
#define TRAINBENCH_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// ---- Tier 1: bugs. Always on (not assert), print file:line and abort. ----
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) check_failed(__FILE__, __LINE__, #cond, "" __VA_ARGS__);         \
    } while (0)
#define ABORT(...) check_failed(__FILE__, __LINE__, "ABORT", "" __VA_ARGS__)
void check_failed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

// ---- Tier 2: environment failures (allocation, I/O). Print what failed, file:line and a
// hint, then exit(EXIT_FAILURE). ----
#define xmalloc(n) xmalloc_impl((n), __FILE__, __LINE__)
#define xcalloc(n, s) xcalloc_impl((n), (s), __FILE__, __LINE__)
#define xrealloc(p, n) xrealloc_impl((p), (n), __FILE__, __LINE__)
#define xaligned_alloc(n) xaligned_alloc_impl((n), __FILE__, __LINE__)  // 64-byte aligned
#define xstrdup(s) xstrdup_impl((s), __FILE__, __LINE__)
#define xfopen(path, mode) xfopen_impl((path), (mode), __FILE__, __LINE__)
void* xmalloc_impl(size_t n, const char* file, int line);
void* xcalloc_impl(size_t n, size_t size, const char* file, int line);
void* xrealloc_impl(void* p, size_t n, const char* file, int line);
void* xaligned_alloc_impl(size_t n, const char* file, int line);
char* xstrdup_impl(const char* s, const char* file, int line);
FILE* xfopen_impl(const char* path, const char* mode, const char* file, int line);

// size arithmetic that refuses to overflow: returns false on overflow
bool size_mul_ok(size_t a, size_t b, size_t* out);
bool size_add_ok(size_t a, size_t b, size_t* out);

// ---- Tier 3: expected outcomes (unsupported combination, bad user input, malformed file).
// A Status carries a code and one clear message; callers decide how to report it. ----
typedef enum {
    STATUS_OK = 0,
    STATUS_UNSUPPORTED,  // valid request this build/CPU cannot do (message says why)
    STATUS_INVALID,      // bad input: malformed file, invalid argument (message names it)
    STATUS_IO,           // file could not be read or written
    STATUS_COUNT
} StatusCode;

typedef struct {
    StatusCode code;
    char msg[512];
} Status;

Status status_ok(void);
Status status_make(StatusCode code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool status_is_ok(Status s) { return s.code == STATUS_OK; }
const char* status_code_name(StatusCode code);

// User input error at the CLI: prints "trainbench: <message>" to stderr and returns 2,
// the exit code for bad input. Use as `return user_error("...")`.
int user_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- Logging (stderr). ----
void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- Parsing numbers from user text; false when the whole string is not a valid number
// in range (no trailing garbage, no overflow). ----
bool parse_long(const char* s, long min, long max, long* out);
bool parse_double(const char* s, double* out);  // accepts finite and non-finite spellings

// ---- Files. ----
// Opens `path` for reading ("rb") only when it is a regular file: a FIFO, device or folder gives
// NULL at once (never a wait for a FIFO's writer), *not_regular (when given) set; NULL with
// errno for a failed open.
FILE* fopen_regular(const char* path, bool* not_regular);
// true when `a` and `b` both exist and are the same file (device and inode; links and other
// spellings of one path included): an output path that would overwrite an input.
bool same_existing_file(const char* a, const char* b);
// Reads a whole regular file into a fresh buffer (NUL-terminated for convenience; *len excludes
// it). A FIFO, device or folder is refused ("not a regular file"), never waited on.
Status read_file(const char* path, uint8_t** data, size_t* len);
// Writes `len` bytes to `path` atomically: a temp file in the same folder, fsync, rename.
// On failure nothing is left at `path` that was not there before.
Status write_file_atomic(const char* path, const void* data, size_t len);
// A file written under a temporary name, PATH.tmp.<pid> in the same folder, and renamed to
// PATH only when complete: atomic_open; atomic_write (any number; the first error is kept in
// .status and later writes do nothing); atomic_commit (fsync, close, rename; on any error
// the temp file is removed and the Status says what failed) or atomic_abort.
typedef struct {
    int fd;
    char* path;
    char* tmp;
    Status status;
} AtomicFile;
Status atomic_open(AtomicFile* f, const char* path);
void atomic_write(AtomicFile* f, const void* data, size_t len);
Status atomic_commit(AtomicFile* f);
void atomic_abort(AtomicFile* f);
// fsync of a folder (makes a rename in it durable); errors are ignored
void fsync_dir(const char* path);
// Removes a file or a folder with everything in it (symlinks are removed, not followed);
// ok when it does not exist.
Status remove_tree(const char* path);
// Removes the entries of `dir` named NAME.tmp.<pid> (files or folders: what an atomic write
// leaves when its process is killed) whose process no longer exists; returns how many.
// Entries of live processes (kill(pid, 0) succeeds or is not ESRCH) are left alone.
int remove_stale_temps(const char* dir);
// At the end of main: flushes and closes stdout; on any write error (full disk, closed pipe,
// /dev/full) prints "trainbench: cannot write standard output: <reason>" and returns rc or 1
// when rc was 0; else returns rc.
int close_stdout_checked(int rc);
// mkdir -p; ok if it exists already as a folder (STATUS_IO when it, or a parent, is a file)
Status make_dirs(const char* path);
// make_dirs, also writing to `top` (n bytes) the outermost folder this call created ("" when
// `path` existed already): what remove_made_dirs(path, top) takes away again
Status make_dirs_noting(const char* path, char* top, size_t n);
// Undoes make_dirs_noting for a command refused before it wrote anything: removes `path` and
// its parents up to `top` with rmdir, stopping at the first that is not empty (never a file).
// Nothing when top is "".
void remove_made_dirs(const char* path, const char* top);
// A folder of the repository (e.g. "reference/golden/optim") as this process can open it:
// `rel` when it exists under the working directory, else the same path next to the
// executable's build folder (build/trainbench, build/asan/trainbench, build/x/tests/test_y ->
// the repository root), so the commands that read committed goldens work from any directory.
// Writes the result to buf (`rel` unchanged when neither exists) and returns buf.
const char* repo_path(const char* rel, char* buf, size_t n);

// true when `path` exists and is a folder (follows symlinks)
bool path_is_dir(const char* path);
// true when `path` exists and is not a folder (follows symlinks): an output folder named by a file
bool path_is_non_dir(const char* path);
// Why `path` is no folder, for a message after `<path> `: "is not a folder" or "does not exist"
const char* path_not_dir_reason(const char* path);

// ---- Child processes, without a shell: argv[0] is looked up in PATH, nothing is
// interpreted (quotes, spaces, newlines in arguments are passed as they are). ----
// Runs argv in folder `cwd` (NULL: ours), stdout to `stdout_path` and stderr to
// `stderr_path` (NULL: inherited; "/dev/null" discards; relative paths are ours, not cwd's; the same path as stdout_path: both
// into that one file, in order), waits, and returns its exit status
// (0-255), or -1 when it could not be started or died from a signal.
int run_program(const char* const* argv, const char* cwd, const char* stdout_path, const char* stderr_path);
// Runs argv (stderr discarded) and captures the first line of its stdout without the newline
// into out; returns its exit status as run_program. *any_output (optional): anything printed.
int run_program_line(const char* const* argv, char* out, size_t cap, bool* any_output);

// Monotonic wall-clock seconds.
double now_seconds(void);

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
