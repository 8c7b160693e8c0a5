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
#include <sys/syscall.h>
#include <unistd.h>

#define SK_ABI 2

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

/* ---- random reads at a queue depth through io_uring (engine_posix.RandRead) ----
 *
 * The ring is set up and mapped by uring.py; this loop only drives it. Why in C: from Python each
 * completion costs ~1 us of interpreter between the reap and its replacement, so at QD 32 on a busy
 * 2-core host fewer reads are in flight than asked (0.78-0.94 of fio's IOPS at 72 % of a core against
 * fio's 90 %). The loop does what fio's io_uring engine does with its defaults (iodepth_batch=1,
 * iodepth_batch_complete_min=1): wait for at least one completion, reap all that are there, and hand
 * each replacement to the kernel as it is queued. Windows are drawn uniformly, as RandRead.draw does,
 * from a splitmix64 stream seeded by the task, so a run is reproducible.
 */
struct sk_ring {
    int fd;
    uint32_t sq_mask, cq_mask;
    uint32_t *sq_tail, *sq_array, *cq_head, *cq_tail;
    uint64_t *sqes; /* 64-byte entries: u64 [1] = offset; u32 [1] = fd, [6] = length */
    uint64_t *cqes; /* 16-byte entries: u64 [0] = user_data; i32 [2] = res */
};

struct sk_windows {
    const int32_t *fds;
    int32_t nfiles;
    int32_t align;
    int64_t windows, window;
    uint64_t rng;
};

struct sk_rr_state { /* kept between calls: the loop returns whenever an output buffer fills */
    int32_t qd, group, inflight, started;
    int64_t deadline;
    int64_t *submitted, *expected; /* per slot */
    int32_t *file_of;
    int64_t *lat, lat_cap, lat_n;
    int64_t *trace, trace_cap, trace_n; /* triples: end ns, bytes, reads */
    int64_t bytes, ops;
    int64_t fail_res, fail_file, fail_offset;
};

#define SYS_io_uring_enter_ 426

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int enter(int fd, unsigned submit, unsigned min_complete, unsigned flags) {
    for (;;) {
        long r = syscall(SYS_io_uring_enter_, fd, submit, min_complete, flags, NULL, 0);
        if (r >= 0) return (int)r;
        if (errno != EINTR && errno != EAGAIN && errno != EBUSY) return -errno;
    }
}

/* queue one read into `slot`'s entry (its address and tag were filled once by own_reads) */
static void queue_read(struct sk_ring *r, struct sk_windows *w, struct sk_rr_state *s, uint32_t slot,
                       uint32_t *tail) {
    int32_t f = w->nfiles > 1 ? (int32_t)(splitmix64(&w->rng) % (uint64_t)w->nfiles) : 0;
    int64_t start = (int64_t)(splitmix64(&w->rng) % (uint64_t)w->windows) * w->window;
    int64_t low = start / w->align * w->align;
    int64_t high = (start + w->window + w->align - 1) / w->align * w->align;
    uint64_t *e = r->sqes + (size_t)slot * 8;
    e[1] = (uint64_t)low;
    ((int32_t *)e)[1] = w->fds[f];
    ((uint32_t *)e)[6] = (uint32_t)(high - low);
    s->expected[slot] = high - low;
    s->file_of[slot] = f;
    r->sq_array[*tail & r->sq_mask] = slot;
    *tail += 1;
}

static int submit(struct sk_ring *r, struct sk_rr_state *s, uint32_t tail, int n, int64_t t0,
                  const uint32_t *slots) {
    __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE);
    int done = 0;
    while (done < n) {
        int got = enter(r->fd, (unsigned)(n - done), 0, 0);
        if (got < 0) return got;
        if (got == 0) return -EIO;
        done += got;
    }
    for (int i = 0; i < n; i++) s->submitted[slots[i]] = t0;
    s->inflight += n;
    return 0;
}

/* 0: finished (deadline passed, nothing in flight); 1: an output buffer is full, flush and call
   again; 2: a read came back short or failed (fail_* say which); -errno: io_uring_enter failed */
int sk_randread(struct sk_ring *r, struct sk_windows *w, struct sk_rr_state *s) {
    uint32_t tail = *r->sq_tail, pending[64];
    if (!s->started) {
        s->started = 1;
        for (int32_t slot = 0; slot < s->qd;) {
            int n = 0;
            for (; n < s->group && slot < s->qd; n++, slot++) {
                queue_read(r, w, s, (uint32_t)slot, &tail);
                pending[n] = (uint32_t)slot;
            }
            int rc = submit(r, s, tail, n, now_ns(), pending);
            if (rc < 0) return rc;
        }
    }
    while (s->inflight > 0) {
        if (s->lat_n + s->qd > s->lat_cap || s->trace_n + 3 > s->trace_cap) return 1;
        uint32_t head = *r->cq_head;
        uint32_t ctail = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
        if (head == ctail) {
            int rc = enter(r->fd, 0, 1, 1 /* IORING_ENTER_GETEVENTS */);
            if (rc < 0) return rc;
            continue;
        }
        int64_t t1 = now_ns();
        int refill = t1 < s->deadline;
        int64_t nbytes = 0, count = 0;
        int n = 0;
        for (; head != ctail; head++) {
            uint64_t *c = r->cqes + (size_t)(head & r->cq_mask) * 2;
            uint32_t slot = (uint32_t)c[0];
            int32_t res = ((int32_t *)c)[2];
            if (res != s->expected[slot]) {
                uint64_t *e = r->sqes + (size_t)slot * 8;
                s->fail_res = res;
                s->fail_file = s->file_of[slot];
                s->fail_offset = (int64_t)e[1];
                __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
                return 2;
            }
            s->lat[s->lat_n++] = t1 - s->submitted[slot];
            nbytes += res;
            count++;
            s->inflight--;
            if (refill) {
                queue_read(r, w, s, slot, &tail);
                pending[n++] = slot;
                if (n == s->group) {
                    __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
                    int rc = submit(r, s, tail, n, now_ns(), pending);
                    if (rc < 0) return rc;
                    n = 0;
                }
            }
        }
        __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
        if (n > 0) {
            int rc = submit(r, s, tail, n, now_ns(), pending);
            if (rc < 0) return rc;
        }
        s->trace[s->trace_n++] = t1;
        s->trace[s->trace_n++] = nbytes;
        s->trace[s->trace_n++] = count;
        s->bytes += nbytes;
        s->ops += count;
    }
    return 0;
}
