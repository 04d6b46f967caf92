/* Measures what watching placeholders costs the kernel, two ways (issue 10,
 * point 8): per-file inode marks (what `fprep agent` does) against one mount
 * mark on a bind mount of the replica plus an ignore mark per file that is
 * not a placeholder. Reads the files (paths relative to ROOT) on stdin;
 * prints the time to mark and the growth of Slab (/proc/meminfo) and of the
 * ext4 inode and dentry caches (/proc/slabinfo) while the group is held.
 * Run as root (it drops the dentry and inode caches before it measures):
 *   git -C ROOT ls-files | fanotify-marks inode ROOT
 *   git -C ROOT ls-files | unshare -m fanotify-marks mount ROOT IGNORED-LIST
 * Build: cc -O2 -o fanotify-marks scripts/fanotify-marks.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

#ifndef FAN_PRE_ACCESS
#define FAN_PRE_ACCESS 0x00100000
#endif
#ifndef FAN_CLASS_PRE_CONTENT
#define FAN_CLASS_PRE_CONTENT 0x08
#endif

static long long meminfo(const char *field) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long value = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') { value = atoll(line + n + 1) * 1024; break; }
    if (f) fclose(f);
    return value;
}

static long long slab(const char *cache) {
    FILE *f = fopen("/proc/slabinfo", "r");
    char line[512];
    long long value = -1;
    size_t n = strlen(cache);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, cache, n) == 0 && line[n] == ' ') { value = atoll(line + n); break; }
    if (f) fclose(f);
    return value;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void drop_caches(void) {
    sync();
    int drop = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (drop >= 0) { (void)!write(drop, "2", 1); close(drop); }
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "inode") != 0 && strcmp(argv[1], "mount") != 0)) {
        fprintf(stderr, "usage: fanotify-marks inode|mount ROOT [IGNORED-LIST] < paths\n");
        return 2;
    }
    int mount_mode = strcmp(argv[1], "mount") == 0;
    const char *root = argv[2];
    /* The paths first, so reading them is not measured. */
    size_t count = 0, capacity = 1024;
    char **paths = malloc(capacity * sizeof *paths);
    char path[4096];
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        if (count == capacity) paths = realloc(paths, (capacity *= 2) * sizeof *paths);
        paths[count++] = strdup(path);
    }
    drop_caches();
    long long slab0 = meminfo("Slab"), inodes0 = slab("ext4_inode_cache"), dentries0 = slab("dentry");
    double start = now();
    int group = fanotify_init(FAN_CLASS_PRE_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_MARKS, O_RDONLY | O_LARGEFILE);
    if (group < 0) { perror("fanotify_init"); return 1; }
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) { perror(root); return 1; }
    long marks = 0;
    if (mount_mode) {
        /* The replica's own bind mount: events only for access through it. */
        if (mount(root, root, NULL, MS_BIND, NULL) != 0) { perror("mount --bind"); return 1; }
        if (fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_PRE_ACCESS, AT_FDCWD, root) != 0) { perror("mark mount"); return 1; }
        marks = 1;
        FILE *ignored = argc > 3 ? fopen(argv[3], "r") : NULL;
        while (ignored && fgets(path, sizeof path, ignored)) {
            path[strcspn(path, "\n")] = 0;
            if (fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_IGNORE_SURV, FAN_PRE_ACCESS, rootfd, path) == 0) marks++;
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            int fd = openat(rootfd, paths[i], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0) continue;
            if (fanotify_mark(group, FAN_MARK_ADD, FAN_PRE_ACCESS, fd, NULL) == 0) marks++;
            close(fd);
        }
    }
    double elapsed = now() - start;
    printf("%s marks: %ld, marked in %.3f s; Slab %+lld KiB, ext4_inode_cache %+lld objects, dentry %+lld objects\n",
           argv[1], marks, elapsed, (meminfo("Slab") - slab0) / 1024, slab("ext4_inode_cache") - inodes0, slab("dentry") - dentries0);
    /* Under memory pressure: marked inodes stay (pinned), unmarked ones go. */
    drop_caches();
    printf("%s after drop_caches: Slab %+lld KiB, ext4_inode_cache %+lld objects, dentry %+lld objects\n",
           argv[1], (meminfo("Slab") - slab0) / 1024, slab("ext4_inode_cache") - inodes0, slab("dentry") - dentries0);
    return 0;
}
