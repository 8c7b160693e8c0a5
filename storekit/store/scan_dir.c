/* One directory's entries with their lstat, for storekit's tree scanner (storekit/store/scan.py).
 *
 * Why C: the scan of a 1,000,000-file tree is system calls (getdents64, one fstatat per entry, the
 * same as find) plus, in Python, a DirEntry and a stat_result object per entry, which costs more
 * than the calls. Here the entries of one directory go into two caller buffers in one call:
 * SK_FIELDS int64 per entry and the names, each ending in '\0', sorted by name (bytes, as
 * `LC_ALL=C sort`): sorting here spares Python a sort of 1,000,000 tuples. fstatat is relative to
 * the open directory, so no path is resolved again per entry, and the entries of a big directory
 * are statted by two threads (on Lustre or NFS each stat is a round trip; here it is kernel CPU).
 * The caller releases the GIL (ctypes.CDLL), so nothing here touches Python objects.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SK_SCAN_ABI 2
#define SK_FIELDS 5 /* size, mtime_ns, ctime_ns, inode, mode */
#define SK_PARALLEL_MIN 64

int sk_scan_abi(void) { return SK_SCAN_ABI; }

static int by_name(const void *a, const void *b, void *names) {
    const char *base = names;
    return strcmp(base + *(const long *)a, base + *(const long *)b);
}

/* Reorders the n records and their names by name; -ENOMEM without scratch memory. */
static long sort_by_name(int64_t *recs, long n, char *names, long used) {
    long *pairs = malloc((size_t)n * 2 * sizeof(long)); /* (offset of the name, record index) */
    int64_t *recs_copy = malloc((size_t)n * SK_FIELDS * sizeof(int64_t));
    char *names_copy = malloc((size_t)used);
    if (pairs == NULL || recs_copy == NULL || names_copy == NULL) {
        free(pairs), free(recs_copy), free(names_copy);
        return -ENOMEM;
    }
    memcpy(recs_copy, recs, (size_t)n * SK_FIELDS * sizeof(int64_t));
    memcpy(names_copy, names, (size_t)used);
    long off = 0;
    for (long i = 0; i < n; i++) {
        pairs[2 * i] = off, pairs[2 * i + 1] = i;
        off += (long)strlen(names_copy + off) + 1;
    }
    qsort_r(pairs, (size_t)n, 2 * sizeof(long), by_name, names_copy);
    long out = 0;
    for (long k = 0; k < n; k++) {
        const char *name = names_copy + pairs[2 * k];
        long len = (long)strlen(name) + 1;
        memcpy(names + out, name, (size_t)len);
        out += len;
        memcpy(recs + k * SK_FIELDS, recs_copy + pairs[2 * k + 1] * SK_FIELDS, SK_FIELDS * sizeof(int64_t));
    }
    free(pairs), free(recs_copy), free(names_copy);
    return 0;
}

struct stat_job {
    int fd;
    const char *names;
    const long *offs;
    int64_t *recs;
    long from, to;
    int err; /* 0, or the errno of the first failure other than ENOENT */
};

/* lstat of entries [from, to) relative to the directory; a vanished one gets mode -1. */
static void *stat_range(void *arg) {
    struct stat_job *job = arg;
    struct stat st;
    for (long i = job->from; i < job->to; i++) {
        int64_t *r = job->recs + i * SK_FIELDS;
        if (fstatat(job->fd, job->names + job->offs[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) {
                job->err = errno;
                return NULL;
            }
            r[4] = -1;
            continue;
        }
        r[0] = (int64_t)st.st_size;
        r[1] = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        r[2] = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
        r[3] = (int64_t)st.st_ino;
        r[4] = (int64_t)st.st_mode;
    }
    return NULL;
}

/* Stats all n entries; a directory of SK_PARALLEL_MIN entries or more is split over two threads,
 * so that the kernel's work for one directory runs on two cores (find uses one). */
static long stat_all(int fd, const char *names, const long *offs, int64_t *recs, long n) {
    struct stat_job head = {fd, names, offs, recs, 0, n, 0}, tail = head;
    pthread_t helper;
    int split = n >= SK_PARALLEL_MIN;
    if (split) {
        head.to = tail.from = n / 2;
        if (pthread_create(&helper, NULL, stat_range, &tail) != 0) split = 0, head.to = n;
    }
    stat_range(&head);
    if (split) pthread_join(helper, NULL);
    if (head.err) return -head.err;
    if (split && tail.err) return -tail.err;
    return 0;
}

/* Drops the entries stat_all found vanished (mode -1); returns how many are left. */
static long compact(int64_t *recs, long n, char *names, const long *offs, long *names_used) {
    long kept = 0, used = 0;
    for (long i = 0; i < n; i++) {
        if (recs[i * SK_FIELDS + 4] == -1) continue;
        long len = (long)strlen(names + offs[i]) + 1;
        memmove(names + used, names + offs[i], (size_t)len);
        if (kept != i) memmove(recs + kept * SK_FIELDS, recs + i * SK_FIELDS, SK_FIELDS * sizeof(int64_t));
        used += len;
        kept++;
    }
    *names_used = used;
    return kept;
}

/* Returns the number of entries, -errno on failure, or -ENOBUFS when a buffer is too small (the
 * caller grows both and calls again). *names_used is the bytes of names written. An entry that
 * vanishes between the listing and its stat (ENOENT) is left out, as find leaves it out. */
long sk_scan_dir(const char *path, int64_t *recs, long max_recs, char *names, long names_cap,
                 long *names_used) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        int err = errno;
        close(fd);
        return -err;
    }
    long *offs = malloc((size_t)max_recs * sizeof(long));
    if (offs == NULL) {
        closedir(dir);
        return -ENOMEM;
    }
    long n = 0, used = 0, rc = 0;
    struct dirent *de;
    for (;;) {
        errno = 0;
        de = readdir(dir);
        if (de == NULL) {
            if (errno != 0) rc = -errno;
            break;
        }
        const char *name = de->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
        long len = (long)strlen(name) + 1;
        if (n >= max_recs || used + len > names_cap) {
            rc = -ENOBUFS;
            break;
        }
        memcpy(names + used, name, (size_t)len);
        offs[n++] = used;
        used += len;
    }
    if (rc == 0) rc = stat_all(fd, names, offs, recs, n);
    if (rc == 0) n = compact(recs, n, names, offs, &used);
    free(offs);
    closedir(dir);
    *names_used = used;
    if (rc == 0 && n > 1) rc = sort_by_name(recs, n, names, used);
    return rc < 0 ? rc : n;
}
