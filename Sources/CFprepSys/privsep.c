/* The agent's privilege separation: a worker process per replica that runs
 * as the replica's owner (see Sources/FprepAgent/AgentWorker.swift), and
 * the unix socket between the agent and it, which carries each event's
 * file descriptor (SCM_RIGHTS). */
#define _GNU_SOURCE
#include "CFprepSys.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Tells the parent why the child did not get to exec: the failing step and
 * errno, then exits. Async-signal-safe. */
static void fail_child(int report, int step) {
    int message[2] = { step, errno };
    (void)!write(report, message, sizeof message);
    _exit(127);
}

pid_t fprep_spawn_worker(int exe, char *const argv[], char *const envp[], uid_t uid, gid_t gid,
                         const gid_t *groups, size_t group_count, int channel, int *failed_step) {
    int report[2];
    *failed_step = 0;
    if (pipe2(report, O_CLOEXEC) != 0) return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(report[0]);
        close(report[1]);
        return -1;
    }
    if (pid == 0) {
        /* The child of a threaded process: raw system calls only until exec
         * (glibc's set*id wrappers signal every thread of the parent's). */
        int high_channel = fcntl(channel, F_DUPFD, 6);
        int high_exe = fcntl(exe, F_DUPFD_CLOEXEC, 6);
        int high_report = fcntl(report[1], F_DUPFD_CLOEXEC, 6);
        if (high_channel < 0 || high_exe < 0 || high_report < 0) fail_child(report[1], FPREP_WORKER_STEP_DESCRIPTORS);
        if (dup2(high_channel, 3) < 0 || dup3(high_exe, 4, O_CLOEXEC) < 0 || dup3(high_report, 5, O_CLOEXEC) < 0)
            fail_child(high_report, FPREP_WORKER_STEP_DESCRIPTORS);
        /* Nothing of the agent's but the channel (and standard error, its
         * log): no other replica's group, socket or lock. */
        syscall(SYS_close_range, 6U, ~0U, 0U);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0) fail_child(5, FPREP_WORKER_STEP_DESCRIPTORS);
        if (devnull > 5) close(devnull);
        /* Its own session: a terminal's Ctrl-C goes to the agent, which
         * stops the worker in order. */
        setsid();
        if (syscall(SYS_setgroups, group_count, groups) != 0) fail_child(5, FPREP_WORKER_STEP_GROUPS);
        if (syscall(SYS_setresgid, gid, gid, gid) != 0) fail_child(5, FPREP_WORKER_STEP_GID);
        if (syscall(SYS_setresuid, uid, uid, uid) != 0) fail_child(5, FPREP_WORKER_STEP_UID);
        /* Dropped for good: no way back to root. */
        if (uid != 0 && (syscall(SYS_setresuid, 0, 0, 0) == 0 || getuid() != uid || geteuid() != uid))
            { errno = EPERM; fail_child(5, FPREP_WORKER_STEP_UID); }
        /* Dies with the agent (a kill -9 of it included). Set after the
         * uid change, which clears it, and checked against a parent that
         * went first. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_child(5, FPREP_WORKER_STEP_EXEC);
        if (getppid() != parent) _exit(0);
        if (chdir("/") != 0) fail_child(5, FPREP_WORKER_STEP_EXEC);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_IGN);
        /* A service's stop signals the whole group: the worker ends when
         * the agent closes its socket, after the hydrations under way. */
        signal(SIGTERM, SIG_IGN);
        /* The program opened by the agent: the owner need not reach its path. */
        syscall(SYS_execveat, 4, "", argv, envp, AT_EMPTY_PATH);
        fail_child(5, FPREP_WORKER_STEP_EXEC);
    }
    close(report[1]);
    int message[2] = { 0, 0 };
    ssize_t got;
    do { got = read(report[0], message, sizeof message); } while (got < 0 && errno == EINTR);
    close(report[0]);
    if (got == (ssize_t)sizeof message) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        *failed_step = message[0];
        errno = message[1];
        return -1;
    }
    return pid;
}

int fprep_open_own_program(void) {
    return open("/proc/self/exe", O_PATH | O_CLOEXEC);
}

int fprep_channel_pair(int fds[2]) {
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds);
}

ssize_t fprep_channel_send(int channel, const void *bytes, size_t count, int fd) {
    size_t done = 0;
    while (done < count) {
        struct iovec part = { .iov_base = (char *)bytes + done, .iov_len = count - done };
        union {
            struct cmsghdr header;
            char space[CMSG_SPACE(sizeof(int))];
        } control;
        struct msghdr message = { .msg_iov = &part, .msg_iovlen = 1 };
        /* The descriptor rides with the first byte of its message. */
        if (fd >= 0 && done == 0) {
            memset(&control, 0, sizeof control);
            message.msg_control = control.space;
            message.msg_controllen = sizeof control.space;
            struct cmsghdr *header = CMSG_FIRSTHDR(&message);
            header->cmsg_level = SOL_SOCKET;
            header->cmsg_type = SCM_RIGHTS;
            header->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(header), &fd, sizeof(int));
        }
        ssize_t sent = sendmsg(channel, &message, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        done += (size_t)sent;
    }
    return (ssize_t)done;
}

ssize_t fprep_channel_receive(int channel, void *bytes, size_t capacity, int *fds, size_t fd_capacity, size_t *fd_count) {
    struct iovec part = { .iov_base = bytes, .iov_len = capacity };
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int) * 16)];
    } control;
    struct msghdr message = { .msg_iov = &part, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof control.space };
    *fd_count = 0;
    ssize_t got;
    do { got = recvmsg(channel, &message, MSG_CMSG_CLOEXEC); } while (got < 0 && errno == EINTR);
    if (got < 0) return -1;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
            /* More than asked for: closed, never leaked. */
            if (*fd_count < fd_capacity) fds[(*fd_count)++] = fd;
            else close(fd);
        }
    }
    return got;
}

int fprep_wait_child(pid_t pid, int timeout_ms, int *status) {
    for (int waited = 0;; waited += 10) {
        pid_t done = waitpid(pid, status, WNOHANG);
        if (done == pid) return 1;
        if (done < 0 && errno != EINTR) return -1;
        if (waited >= timeout_ms) return 0;
        usleep(10000);
    }
}

int fprep_reclaim_file(int dirfd, const char *name, uid_t uid, gid_t gid) {
    int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    struct stat st;
    int result = 0;
    /* Root's own file, in no other folder (one link): nothing but what a
     * root process wrote there; the inode is the one looked at. */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && st.st_nlink == 1) {
        result = fchownat(fd, "", uid, gid, AT_EMPTY_PATH) == 0 ? 1 : -1;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return result;
}

int fprep_open_folder_nofollow(int dirfd, const char *name) {
    return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}
