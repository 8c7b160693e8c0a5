/* The tree walk of storekit's scanner (storekit/store/scan.py): every entry below a directory with
 * its lstat, depth first, a directory before its contents, names sorted by bytes within a directory.
 *
 * Why C, and why a thread: the walk is system calls (getdents64, one fstatat per entry, the same as
 * find) plus, in Python, a few objects per entry. Done one after the other in one thread, the two
 * cost about twice find's time; here a walker thread makes the calls and fills batches of entries
 * (SK_FIELDS int64 columns + the full relative names) while the caller's thread turns the previous
 * batch into Python objects, so the two overlap on two cores. The caller copies each batch out
 * (sk_walk_next), with the GIL released (ctypes.CDLL): nothing here touches Python objects.
 *
 * Read-ahead is at most two batches (memory: depth x widest directory + two batches). With
 * `threaded` 0 the walk advances only inside sk_walk_next, in the caller's thread: nothing is listed
 * before it is asked for (tests use this to change the tree between two entries).
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

#define SK_SCAN_ABI 3
#define SK_FIELDS 5           /* size, mtime_ns, ctime_ns, inode, mode */
#define SK_PARALLEL_MIN 1024  /* a directory this big is statted by two threads (network file systems) */

int sk_scan_abi(void) { return SK_SCAN_ABI; }

static long live_walkers; /* started and not yet joined: a test checks none is left behind */
long sk_walk_live(void) { return __atomic_load_n(&live_walkers, __ATOMIC_SEQ_CST); }

struct level { /* one listed directory */
    char *names;    /* its entries' names, each ending in '\0' */
    long *offs;     /* offset of each name */
    int64_t *recs;  /* SK_FIELDS per entry; mode -1: vanished before its stat */
    long *order;    /* the kept entries, sorted by name */
    long n, next;   /* kept entries; the next one to emit */
    size_t path_len, rel_len; /* this directory's path and its entries' rel prefix, in the walk's buffers */
};

struct batch {
    long n;
    size_t used;   /* bytes of names */
    int64_t *cols; /* SK_FIELDS columns of `cap` entries */
    char *names;
    int last;      /* the walk ended (done or failed) with this batch */
};

struct walk {
    long cap;           /* entries per batch */
    size_t names_cap;   /* bytes of names per batch */
    struct level *stack;
    long depth, stack_cap;
    char *path, *rel;   /* the directory being listed; prefix + rel of the entries being emitted */
    size_t path_cap, rel_cap;
    long pending;       /* 1 + index of an emitted directory to descend into next, or 0 */
    int err;            /* errno that ended the walk */
    char *err_path;
    int over;           /* the last batch was handed out */
    /* threaded mode: two slots, the walker fills one while the caller copies the other */
    int threaded, started, stop;
    struct batch slot[2];
    int ready[2], wslot, rslot;
    pthread_mutex_t mu;
    pthread_cond_t cond_ready, cond_free;
    pthread_t thread;
};

static int by_name(const void *a, const void *b, void *lv) {
    const struct level *l = lv;
    return strcmp(l->names + l->offs[*(const long *)a], l->names + l->offs[*(const long *)b]);
}

struct stat_job {
    int fd;
    struct level *lv;
    long from, to;
    int err; /* 0, or the errno of the first failure other than ENOENT */
};

static void *stat_range(void *arg) {
    struct stat_job *job = arg;
    struct stat st;
    for (long i = job->from; i < job->to; i++) {
        int64_t *r = job->lv->recs + i * SK_FIELDS;
        if (fstatat(job->fd, job->lv->names + job->lv->offs[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) {
                job->err = errno;
                return NULL;
            }
            r[4] = -1; /* removed since the listing: left out, as find leaves it out */
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

static int stat_all(int fd, struct level *lv, long n) {
    struct stat_job head = {fd, lv, 0, n, 0}, tail = head;
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

static void free_level(struct level *lv) {
    free(lv->names), free(lv->offs), free(lv->recs), free(lv->order);
    memset(lv, 0, sizeof *lv);
}

static int grow(void **p, size_t *cap, size_t need, size_t unit) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * unit);
    if (q == NULL) return -ENOMEM;
    *p = q, *cap = c;
    return 0;
}

/* Lists and stats the directory `path` into `lv` (entries sorted); 0 or -errno. `follow`: the
 * top directory may be reached through a link (as os.scandir does); below it nothing is followed. */
static int list_dir(const char *path, int follow, struct level *lv) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0) return -errno;
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        int err = errno;
        close(fd);
        return -err;
    }
    size_t names_cap = 0, offs_cap = 0, used = 0;
    long n = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(dir);
        if (de == NULL) {
            if (errno != 0) rc = -errno;
            break;
        }
        const char *name = de->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
        size_t len = strlen(name) + 1;
        if ((rc = grow((void **)&lv->names, &names_cap, used + len, 1)) != 0) break;
        if ((rc = grow((void **)&lv->offs, &offs_cap, (size_t)n + 1, sizeof(long))) != 0) break;
        memcpy(lv->names + used, name, len);
        lv->offs[n++] = (long)used;
        used += len;
    }
    if (rc == 0 && n > 0) {
        lv->recs = malloc((size_t)n * SK_FIELDS * sizeof(int64_t));
        lv->order = malloc((size_t)n * sizeof(long));
        rc = lv->recs && lv->order ? stat_all(dirfd(dir), lv, n) : -ENOMEM;
    }
    closedir(dir);
    if (rc != 0) return rc;
    for (long i = 0; i < n; i++)
        if (lv->recs[i * SK_FIELDS + 4] != -1) lv->order[lv->n++] = i;
    if (lv->n > 1) qsort_r(lv->order, (size_t)lv->n, sizeof(long), by_name, lv);
    return 0;
}

static void fail(struct walk *w, int err, const char *where) {
    w->err = err;
    w->err_path = strdup(where);
}

static int push(struct walk *w, struct level *lv) {
    if (w->depth == w->stack_cap) {
        long c = w->stack_cap ? w->stack_cap * 2 : 16;
        struct level *s = realloc(w->stack, (size_t)c * sizeof *s);
        if (s == NULL) return -ENOMEM;
        w->stack = s, w->stack_cap = c;
    }
    w->stack[w->depth++] = *lv;
    return 0;
}

/* Lists the directory emitted last (w->pending) and pushes it; one removed or replaced since its
 * parent was listed is left out, as find leaves it out. */
static void descend(struct walk *w) {
    struct level *lv = &w->stack[w->depth - 1];
    const char *name = lv->names + lv->offs[w->pending - 1];
    size_t len = strlen(name);
    w->pending = 0;
    if (grow((void **)&w->path, &w->path_cap, lv->path_len + len + 2, 1) ||
        grow((void **)&w->rel, &w->rel_cap, lv->rel_len + len + 2, 1)) {
        fail(w, ENOMEM, name);
        return;
    }
    w->path[lv->path_len] = '/';
    memcpy(w->path + lv->path_len + 1, name, len + 1);
    memcpy(w->rel + lv->rel_len, name, len);
    w->rel[lv->rel_len + len] = '/';
    struct level child = {0};
    child.path_len = lv->path_len + 1 + len, child.rel_len = lv->rel_len + len + 1;
    int rc = list_dir(w->path, 0, &child);
    if (rc == 0) rc = push(w, &child);
    if (rc == 0) return;
    free_level(&child);
    if (rc != -ENOENT && rc != -ENOTDIR && rc != -ELOOP) fail(w, -rc, w->path);
}

/* Emits entries into `b` until it is full or the walk ends. */
static void fill(struct walk *w, struct batch *b) {
    b->n = 0, b->used = 0, b->last = 0;
    while (b->n < w->cap && !w->err) {
        if (w->pending) {
            descend(w);
            continue;
        }
        if (w->depth == 0) break;
        struct level *lv = &w->stack[w->depth - 1];
        if (lv->next == lv->n) {
            free_level(lv);
            w->depth--;
            continue;
        }
        long k = lv->order[lv->next];
        const char *name = lv->names + lv->offs[k];
        size_t len = strlen(name) + 1, need = lv->rel_len + len;
        if (b->used + need > w->names_cap) {
            if (b->n == 0) fail(w, ENAMETOOLONG, name);
            break;
        }
        memcpy(b->names + b->used, w->rel, lv->rel_len);
        memcpy(b->names + b->used + lv->rel_len, name, len);
        const int64_t *r = lv->recs + k * SK_FIELDS;
        for (int f = 0; f < SK_FIELDS; f++) b->cols[f * w->cap + b->n] = r[f];
        b->n++, b->used += need, lv->next++;
        if (S_ISDIR((mode_t)r[4])) w->pending = k + 1;
    }
    b->last = w->err || (w->depth == 0 && !w->pending);
}

static void *walker(void *arg) {
    struct walk *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->ready[w->wslot] && !w->stop) pthread_cond_wait(&w->cond_free, &w->mu);
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop) return NULL;
        struct batch *b = &w->slot[w->wslot];
        fill(w, b);
        pthread_mutex_lock(&w->mu);
        w->ready[w->wslot] = 1;
        w->wslot ^= 1;
        pthread_cond_signal(&w->cond_ready);
        pthread_mutex_unlock(&w->mu);
        if (b->last) return NULL;
    }
}

void sk_walk_close(struct walk *w);

/* A walk below `path`, each entry named `prefix` + its path below `path`; NULL without memory.
 * Errors (the top directory included) come from sk_walk_next, after the entries before them. */
struct walk *sk_walk_open(const char *path, const char *prefix, long cap, long names_cap, int threaded) {
    struct walk *w = calloc(1, sizeof *w);
    if (w == NULL) return NULL;
    w->cap = cap, w->names_cap = (size_t)names_cap, w->threaded = threaded;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond_ready, NULL);
    pthread_cond_init(&w->cond_free, NULL);
    size_t plen = strlen(path), rlen = strlen(prefix);
    struct level top = {0};
    top.path_len = plen, top.rel_len = rlen;
    int ok = !grow((void **)&w->path, &w->path_cap, plen + 1, 1) &&
             !grow((void **)&w->rel, &w->rel_cap, rlen + 1, 1);
    for (int s = 0; ok && s < (threaded ? 2 : 0); s++) {
        w->slot[s].cols = malloc((size_t)cap * SK_FIELDS * sizeof(int64_t));
        w->slot[s].names = malloc((size_t)names_cap);
        ok = w->slot[s].cols && w->slot[s].names;
    }
    if (!ok) {
        sk_walk_close(w);
        return NULL;
    }
    memcpy(w->path, path, plen + 1);
    memcpy(w->rel, prefix, rlen + 1);
    int rc = list_dir(path, 1, &top);
    if (rc == 0) rc = push(w, &top);
    if (rc != 0) {
        free_level(&top);
        fail(w, -rc, path);
    }
    return w;
}

/* Copies the next batch into the caller's columns (SK_FIELDS x cap int64) and names; returns its
 * entries, 0 at the end, or -errno once the entries before the failure were handed out. */
long sk_walk_next(struct walk *w, int64_t *cols, char *names, long *names_used) {
    *names_used = 0;
    if (w->over) return w->err ? -w->err : 0;
    struct batch b;
    if (!w->threaded) {
        b.cols = cols, b.names = names;
        fill(w, &b);
    } else {
        if (!w->started) {
            if (pthread_create(&w->thread, NULL, walker, w) != 0) return -EAGAIN;
            w->started = 1;
            __atomic_add_fetch(&live_walkers, 1, __ATOMIC_SEQ_CST);
        }
        pthread_mutex_lock(&w->mu);
        while (!w->ready[w->rslot]) pthread_cond_wait(&w->cond_ready, &w->mu);
        pthread_mutex_unlock(&w->mu);
        b = w->slot[w->rslot];
        for (int f = 0; f < SK_FIELDS; f++)
            memcpy(cols + f * w->cap, b.cols + f * w->cap, (size_t)b.n * sizeof(int64_t));
        memcpy(names, b.names, b.used);
        pthread_mutex_lock(&w->mu);
        w->ready[w->rslot] = 0;
        w->rslot ^= 1;
        pthread_cond_signal(&w->cond_free);
        pthread_mutex_unlock(&w->mu);
    }
    w->over = b.last;
    *names_used = (long)b.used;
    if (b.n == 0 && b.last) return w->err ? -w->err : 0;
    return b.n;
}

/* The path the walk failed on (NULL if it did not fail). */
const char *sk_walk_error_path(struct walk *w) { return w->err_path; }

/* Stops the walker (waiting for it) and frees everything; the walk may be unfinished. */
void sk_walk_close(struct walk *w) {
    if (w == NULL) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cond_free);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        __atomic_sub_fetch(&live_walkers, 1, __ATOMIC_SEQ_CST);
    }
    for (long i = 0; i < w->depth; i++) free_level(&w->stack[i]);
    for (int s = 0; s < 2; s++) free(w->slot[s].cols), free(w->slot[s].names);
    free(w->stack), free(w->path), free(w->rel), free(w->err_path);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond_ready);
    pthread_cond_destroy(&w->cond_free);
    free(w);
}
