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

/* the operation ended now: store its window and pass its result on */
static inline int timed(struct sk_times *t, int slot, int64_t t0, int result) {
    t->end[slot] = now_ns();
    t->start[slot] = t0;
    return result;
}

/* write all of buf[0:size], or read until size bytes or end of file; then close. Bytes moved, or
   -errno. A write that moves nothing ends the loop too: the short count reaches the caller. */
static int move_and_close(int fd, char *buf, int size, int writing) {
    int done = 0;
    while (done < size) {
        size_t want = (size_t)(size - done);
        ssize_t n = writing ? write(fd, buf + done, want) : read(fd, buf + done, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            close(fd);
            return -err;
        }
        if (n == 0) break;
        done += (int)n;
    }
    return close(fd) != 0 ? -errno : done;
}

int sk_abi(void) { return SK_ABI; }

/* create a new file (O_EXCL) holding buf[0:size] */
int sk_create(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    int64_t t0 = now_ns();
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int done = move_and_close(fd, buf, size, 1);
    return done < 0 ? done : timed(t, slot, t0, done);
}

int sk_stat(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    (void)buf;
    (void)size;
    struct stat st;
    int64_t t0 = now_ns();
    if (stat(path, &st) != 0) return -errno;
    return timed(t, slot, t0, 0);
}

/* read up to `size` bytes (callers ask one more than expected, to notice a longer file) */
int sk_read(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    int64_t t0 = now_ns();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int done = move_and_close(fd, buf, size, 0);
    return done < 0 ? done : timed(t, slot, t0, done);
}

int sk_unlink(struct sk_times *t, int slot, const char *path, char *buf, int size) {
    (void)buf;
    (void)size;
    int64_t t0 = now_ns();
    if (unlink(path) != 0) return -errno;
    return timed(t, slot, t0, 0);
}
