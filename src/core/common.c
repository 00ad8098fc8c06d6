// common.c — implementation of common.h: CHECK failures, x-wrappers, Status, logging,
// number parsing, whole-file reads and atomic writes.
#include "core/common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "trainbench: internal error at %s:%d: CHECK(%s) failed", file, line, cond);
    if (fmt && fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputs("\n  this is a bug in trainbench; please report it with the command line used\n",
          stderr);
    abort();
}

static void env_failure(const char* file, int line, const char* what, const char* hint) {
    fflush(stdout);
    fprintf(stderr, "trainbench: %s (at %s:%d)\n  hint: %s\n", what, file, line, hint);
    exit(EXIT_FAILURE);
}

static void alloc_failure(size_t n, const char* file, int line) {
    char what[128];
    snprintf(what, sizeof what, "out of memory allocating %zu bytes", n);
    env_failure(file, line, what,
                "use a smaller model/batch, or free memory (see `free -h`)");
}

void* xmalloc_impl(size_t n, const char* file, int line) {
    void* p = malloc(n ? n : 1);
    if (!p) alloc_failure(n, file, line);
    return p;
}

void* xcalloc_impl(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) alloc_failure(n * size, file, line);
    return p;
}

void* xrealloc_impl(void* p, size_t n, const char* file, int line) {
    void* q = realloc(p, n ? n : 1);
    if (!q) alloc_failure(n, file, line);
    return q;
}

void* xaligned_alloc_impl(size_t n, const char* file, int line) {
    size_t rounded = (n + 63) / 64 * 64;
    if (rounded < n) alloc_failure(n, file, line);
    void* p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) alloc_failure(n, file, line);
    return p;
}

char* xstrdup_impl(const char* s, const char* file, int line) {
    size_t n = strlen(s) + 1;
    char* p = xmalloc_impl(n, file, line);
    memcpy(p, s, n);
    return p;
}

FILE* xfopen_impl(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f) {
        char what[1024];
        snprintf(what, sizeof what, "cannot open '%s' (mode %s): %s", path, mode,
                 strerror(errno));
        env_failure(file, line, what, "check that the path exists and is accessible");
    }
    return f;
}

bool size_mul_ok(size_t a, size_t b, size_t* out) {
    return !__builtin_mul_overflow(a, b, out);
}

bool size_add_ok(size_t a, size_t b, size_t* out) {
    return !__builtin_add_overflow(a, b, out);
}

Status status_ok(void) {
    Status s;
    s.code = STATUS_OK;
    s.msg[0] = '\0';
    return s;
}

Status status_make(StatusCode code, const char* fmt, ...) {
    Status s;
    s.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.msg, sizeof s.msg, fmt, ap);
    va_end(ap);
    return s;
}

const char* status_code_name(StatusCode code) {
    static const char* const names[STATUS_COUNT] = {"ok", "unsupported", "invalid", "io"};
    CHECK(code >= 0 && code < STATUS_COUNT);
    return names[code];
}

int user_error(const char* fmt, ...) {
    fflush(stdout);
    fputs("trainbench: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

static void log_line(const char* level, const char* fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "[trainbench %s] ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void log_info(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line("info", fmt, ap);
    va_end(ap);
}

void log_warn(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line("warn", fmt, ap);
    va_end(ap);
}

bool parse_long(const char* s, long min, long max, long* out) {
    if (!s || !*s) return false;
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return false;
    if (v < min || v > max) return false;
    *out = v;
    return true;
}

bool parse_double(const char* s, double* out) {
    if (!s || !*s) return false;
    char* end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0') return false;
    if (errno == ERANGE && isinf(v)) return false;  // overflow: "1e999"
    *out = v;
    return true;
}

bool same_existing_file(const char* a, const char* b) {
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

FILE* fopen_regular(const char* path, bool* not_regular) {
    if (not_regular) *not_regular = false;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        if (not_regular) *not_regular = true;
        errno = EINVAL;
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE* f = fdopen(fd, "rb");
    if (!f) close(fd);
    return f;
}

Status read_file(const char* path, uint8_t** data, size_t* len) {
    *data = NULL;
    *len = 0;
    bool not_regular = false;
    FILE* f = fopen_regular(path, &not_regular);
    if (!f && not_regular) return status_make(STATUS_IO, "%s: not a regular file", path);
    if (!f) return status_make(STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return status_make(STATUS_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    size_t n = (size_t)st.st_size;
    uint8_t* buf = xaligned_alloc(n + 1);
    size_t got = n ? fread(buf, 1, n, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return status_make(STATUS_IO, "%s: read failed after %zu of %zu bytes", path, got, n);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return status_ok();
}

// ---- atomic files ----
Status atomic_open(AtomicFile* f, const char* path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = xstrdup(path);
    size_t cap = strlen(path) + 32;
    f->tmp = xmalloc(cap);
    snprintf(f->tmp, cap, "%s.tmp.%ld", path, (long)getpid());
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        Status s = status_make(STATUS_IO, "%s: cannot create temp file: %s", path, strerror(errno));
        free(f->tmp);
        free(f->path);
        memset(f, 0, sizeof *f);
        f->fd = -1;
        return s;
    }
    f->status = status_ok();
    return status_ok();
}

void atomic_write(AtomicFile* f, const void* data, size_t len) {
    if (!status_is_ok(f->status)) return;
    const uint8_t* p = data;
    while (len > 0) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            f->status = status_make(STATUS_IO, "%s: write failed: %s", f->path, strerror(errno));
            return;
        }
        p += w;
        len -= (size_t)w;
    }
}

void atomic_abort(AtomicFile* f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

Status atomic_commit(AtomicFile* f) {
    Status s = f->status;
    if (status_is_ok(s) && fsync(f->fd) != 0)
        s = status_make(STATUS_IO, "%s: flush failed: %s", f->path, strerror(errno));
    int rc = close(f->fd);
    f->fd = -1;
    if (status_is_ok(s) && rc != 0) s = status_make(STATUS_IO, "%s: close failed: %s", f->path, strerror(errno));
    if (status_is_ok(s) && rename(f->tmp, f->path) != 0)
        s = status_make(STATUS_IO, "%s: rename from temp failed: %s", f->path, strerror(errno));
    if (!status_is_ok(s)) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
    return s;
}

Status write_file_atomic(const char* path, const void* data, size_t len) {
    AtomicFile f;
    Status s = atomic_open(&f, path);
    if (!status_is_ok(s)) return s;
    atomic_write(&f, data, len);
    return atomic_commit(&f);
}

void fsync_dir(const char* path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

// NAME.tmp.<pid> -> pid (> 0), else 0
static long temp_name_pid(const char* name) {
    const char* t = NULL;
    for (const char* p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
    if (!t || t == name) return 0;
    long pid;
    return parse_long(t + 5, 1, LONG_MAX, &pid) ? pid : 0;
}

static int remove_tree_cb(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

Status remove_tree(const char* path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? status_ok()
                                                      : status_make(STATUS_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return unlink(path) == 0 ? status_ok()
                                                      : status_make(STATUS_IO, "%s: cannot remove: %s", path, strerror(errno));
    if (nftw(path, remove_tree_cb, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return status_make(STATUS_IO, "%s: cannot remove: %s", path, strerror(errno));
    return status_ok();
}

int remove_stale_temps(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* de;
    while ((de = readdir(d))) {
        long pid = temp_name_pid(de->d_name);
        if (pid <= 0 || pid == (long)getpid() || pid > INT_MAX) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
        size_t cap = strlen(dir) + strlen(de->d_name) + 2;
        char* p = xmalloc(cap);
        snprintf(p, cap, "%s/%s", dir, de->d_name);
        if (status_is_ok(remove_tree(p))) n++;
        free(p);
    }
    closedir(d);
    return n;
}

int close_stdout_checked(int rc) {
    bool earlier = ferror(stdout) != 0;  // a write failed before (its errno is gone)
    int err = 0;
    errno = 0;
    if (fflush(stdout) != 0) err = errno ? errno : EIO;
    if (fclose(stdout) != 0 && !err) err = errno ? errno : EIO;
    if (!err && !earlier) return rc;
    fprintf(stderr, "trainbench: cannot write standard output: %s\n",
            err ? strerror(err) : "a write failed (full disk, closed pipe or unwritable file)");
    return rc ? rc : 1;
}

Status make_dirs(const char* path) { return make_dirs_noting(path, NULL, 0); }

Status make_dirs_noting(const char* path, char* top, size_t n) {
    if (top && n) top[0] = '\0';
    char* buf = xstrdup(path);
    for (char* p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0755) == 0) {
                if (top && n && !top[0]) snprintf(top, n, "%s", buf);
            } else if (errno != EEXIST) {
                Status s = status_make(STATUS_IO, "%s: cannot create folder: %s", buf, strerror(errno));
                free(buf);
                return s;
            }
            *p = saved;
            if (saved == '\0') break;
        }
    }
    free(buf);
    if (!path_is_dir(path)) return status_make(STATUS_IO, "%s: exists and is not a folder", path);
    return status_ok();
}

void remove_made_dirs(const char* path, const char* top) {
    if (!top || !top[0]) return;
    char* buf = xstrdup(path);
    size_t len = strlen(buf), top_len = strlen(top);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';  // "out/" as "out"
    for (;;) {
        if (rmdir(buf) != 0) break;  // not empty (or gone): leave it and its parents
        if (len <= top_len) break;   // `top` itself removed
        char* slash = strrchr(buf, '/');
        if (!slash || slash == buf) break;
        *slash = '\0';
        len = (size_t)(slash - buf);
        if (len < top_len) break;
    }
    free(buf);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool path_is_dir(const char* path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool path_is_non_dir(const char* path) {
    struct stat sb;
    return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

const char* path_not_dir_reason(const char* path) {
    return path_is_non_dir(path) ? "is not a folder" : "does not exist";
}

// In the child: point fd at path (opened for writing) or leave it; _exit(127) on failure.
static void child_redirect(int fd, const char* path) {
    if (!path) return;
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f < 0 || dup2(f, fd) < 0) _exit(127);
}

static int wait_child(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int run_program(const char* const* argv, const char* cwd, const char* stdout_path, const char* stderr_path) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        // redirect before chdir: relative paths are the caller's, not cwd's
        child_redirect(STDOUT_FILENO, stdout_path);
        if (stderr_path && stdout_path && !strcmp(stderr_path, stdout_path)) {
            if (dup2(STDOUT_FILENO, STDERR_FILENO) < 0) _exit(127);  // one file, one offset
        } else {
            child_redirect(STDERR_FILENO, stderr_path);
        }
        if (cwd && chdir(cwd) != 0) _exit(127);
        execvp(argv[0], (char* const*)argv);
        _exit(127);
    }
    return wait_child(pid);
}

int run_program_line(const char* const* argv, char* out, size_t cap, bool* any_output) {
    out[0] = 0;
    if (any_output) *any_output = false;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(127);
        child_redirect(STDERR_FILENO, "/dev/null");
        execvp(argv[0], (char* const*)argv);
        _exit(127);
    }
    close(fds[1]);
    FILE* p = fdopen(fds[0], "r");
    if (!p) {
        close(fds[0]);
        wait_child(pid);
        return -1;
    }
    bool got = fgets(out, (int)cap, p) != NULL;
    char sink[256];
    while (fgets(sink, sizeof sink, p)) got = true;  // drain so the child never blocks
    fclose(p);
    out[strcspn(out, "\n")] = 0;
    if (any_output) *any_output = got;
    return wait_child(pid);
}

const char* repo_path(const char* rel, char* buf, size_t n) {
    snprintf(buf, n, "%s", rel);
    if (rel[0] == '/' || path_is_dir(rel)) return buf;
    char exe[2048];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return buf;
    exe[len] = 0;
    char* slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    char cand[4096];
    for (int up = 1; up <= 3; up++) {
        int k = snprintf(cand, sizeof cand, "%s", exe);
        for (int j = 0; j < up && k < (int)sizeof cand; j++) k += snprintf(cand + k, sizeof cand - (size_t)k, "/..");
        if (k < (int)sizeof cand) snprintf(cand + k, sizeof cand - (size_t)k, "/%s", rel);
        if (path_is_dir(cand)) {
            snprintf(buf, n, "%s", cand);
            break;
        }
    }
    return buf;
}
