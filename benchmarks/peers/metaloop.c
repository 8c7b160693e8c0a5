/* The third reference for small-file rates: nothing but the system call between two clock readings.
 *
 *   metaloop OP DIR COUNT [FORMAT [fadvise]]     OP = create | stat | unlink
 *
 * Paths are printf(FORMAT, DIR, i), built before the loop; the default, "%s/w0000.%08d", gives
 * storekit's meta names (w0000.00000000 ...), "%s/w0000.0.%d" fio's.
 * Each call is timed alone with CLOCK_MONOTONIC, as fio's file engines and storekit's timed_ops.c
 * time theirs; create times open() only (fio's filecreate window) and closes outside the window.
 * "fadvise" adds, between two timed calls, the failing posix_fadvise(-1, ...) that fio's file engines
 * make for every file (fadvise_hint=1, fio's default): one extra system call outside the window.
 * Prints one JSON line: calls, mean/p50 of the per-call windows (ns), and the whole loop's wall time.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: metaloop create|stat|unlink DIR COUNT [FORMAT [fadvise]]\n");
        return 2;
    }
    const char *op = argv[1], *dir = argv[2], *format = argc > 4 ? argv[4] : "%s/w0000.%08d";
    int n = atoi(argv[3]);
    int between = argc > 5 && strcmp(argv[5], "fadvise") == 0;
    char **paths = malloc(sizeof(char *) * (size_t)n);
    int64_t *lat = malloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int len = snprintf(NULL, 0, format, dir, i) + 1;
        paths[i] = malloc((size_t)len);
        snprintf(paths[i], (size_t)len, format, dir, i);
    }
    struct stat st;
    int64_t sum = 0, begin = now_ns();
    for (int i = 0; i < n; i++) {
        int64_t t0, t1;
        int rc;
        if (op[0] == 'c') {
            t0 = now_ns();
            rc = open(paths[i], O_CREAT | O_RDWR, 0600);
            t1 = now_ns();
            if (rc >= 0) rc = close(rc);
        } else if (op[0] == 's') {
            t0 = now_ns();
            rc = stat(paths[i], &st);
            t1 = now_ns();
        } else {
            t0 = now_ns();
            rc = unlink(paths[i]);
            t1 = now_ns();
        }
        if (rc < 0) {
            perror(paths[i]);
            return 1;
        }
        if (between) posix_fadvise(-1, 0, 4096, POSIX_FADV_SEQUENTIAL);
        lat[i] = t1 - t0;
        sum += lat[i];
    }
    int64_t wall = now_ns() - begin;
    qsort(lat, (size_t)n, sizeof(int64_t), cmp64);
    printf("{\"op\": \"%s\", \"fadvise_between\": %d, \"calls\": %d, \"mean_ns\": %.1f, \"p50_ns\": %lld, \"wall_ns\": %lld}\n", op, between, n,
           (double)sum / n, (long long)lat[n / 2], (long long)wall);
    return 0;
}
