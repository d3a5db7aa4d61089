#define _GNU_SOURCE
#include "cspawn.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

static int exec_fd_now(int fd, char *const argv[], char *const envp[]) {
    syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
    return errno;
}

pid_t paird_spawn_fd(int exec_fd, char *const argv[], char *const envp[],
                     int stdin_fd, int out_fd, int *err) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) { *err = errno; return -1; }
    pid_t pid = fork();
    if (pid < 0) {
        *err = errno;
        close(report[0]);
        close(report[1]);
        return -1;
    }
    if (pid == 0) {
        // The child: async-signal-safe calls only (paird has other threads).
        setpgid(0, 0);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
        if (dup2(stdin_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0) goto fail;
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int e = exec_fd_now(exec_fd, argv, envp);
        if (e == ENOENT) {
            // A script: its interpreter opens /dev/fd/N, which close-on-exec would close.
            int flags = fcntl(exec_fd, F_GETFD);
            if (flags >= 0 && fcntl(exec_fd, F_SETFD, flags & ~FD_CLOEXEC) == 0) e = exec_fd_now(exec_fd, argv, envp);
        }
        errno = e;
    fail:;
        int code = errno;
        (void)!write(report[1], &code, sizeof code);
        _exit(127);
    }
    // Also from the parent, so the group exists before anyone signals it.
    setpgid(pid, pid);
    close(report[1]);
    int code = 0;
    ssize_t n;
    do { n = read(report[0], &code, sizeof code); } while (n < 0 && errno == EINTR);
    close(report[0]);
    if (n == (ssize_t)sizeof code) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        *err = code;
        return -1;
    }
    return pid;
}

int paird_set_child_subreaper(void) {
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ? 0 : errno;
}

int paird_open_path_nofollow(int dirfd, const char *name) {
    return openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
}

int paird_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}
