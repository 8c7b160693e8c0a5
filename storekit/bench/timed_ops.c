/* storekit bench: one timed small-file operation per call, compiled on first use (native.py).
 *
 * The timed window is two CLOCK_MONOTONIC readings around the system calls, as fio's filecreate and
 * filestat engines time theirs; the loop over files stays in Python. Timed from Python instead, a
 * ~2 us page-cached stat also carries the ctypes call (~0.5 us). CLOCK_MONOTONIC is the clock of
 * Python's time.perf_counter_ns on Linux, so these readings merge with the worker's own.
 *
 * Every function: (times, slot, path, buf, size) -> bytes moved (>= 0) or -errno. The start and end
 * are stored in times->start[slot] / times->end[slot] only when the operation succeeded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SK_ABI 1

struct sk_times {
    int64_t *start;
    int64_t *end;
};

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int fail_closing(int fd) {
    int err = errno;
    close(fd);
    return -err;
}

int sk_abi(void) { return SK_ABI; }

/* create a new file (O_EXCL) holding buf[0:size] */
int sk_create(struct sk_times *t, int slot, const char *path, const char *buf, int size) {
    int64_t t0 = now_ns();
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int done = 0;
    while (done < size) {
        ssize_t n = write(fd, buf + done, (size_t)(size - done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail_closing(fd);
        }
        done += (int)n;
    }
    if (close(fd) != 0) return -errno;
    t->end[slot] = now_ns();
    t->start[slot] = t0;
    return done;
}

int sk_stat(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    (void)buf;
    (void)size;
    struct stat st;
    int64_t t0 = now_ns();
    if (stat(path, &st) != 0) return -errno;
    t->end[slot] = now_ns();
    t->start[slot] = t0;
    return 0;
}

/* read up to `size` bytes (callers ask one more than expected, to notice a longer file) */
int sk_read(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    int64_t t0 = now_ns();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int done = 0;
    while (done < size) {
        ssize_t n = read(fd, buf + done, (size_t)(size - done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail_closing(fd);
        }
        if (n == 0) break;
        done += (int)n;
    }
    if (close(fd) != 0) return -errno;
    t->end[slot] = now_ns();
    t->start[slot] = t0;
    return done;
}

int sk_unlink(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    (void)buf;
    (void)size;
    int64_t t0 = now_ns();
    if (unlink(path) != 0) return -errno;
    t->end[slot] = now_ns();
    t->start[slot] = t0;
    return 0;
}
