#ifndef PAIRD_CSPAWN_H
#define PAIRD_CSPAWN_H
#include <sys/types.h>

/// Runs the file open at `exec_fd` (an O_PATH descriptor, checked by the caller with fstat) in a
/// child: fork, then in the child only async-signal-safe calls: its own process group, stdin from
/// `stdin_fd`, stdout and stderr to `out_fd`, every signal at its default disposition and an
/// empty mask, then execveat(exec_fd, "", argv, envp, AT_EMPTY_PATH). What is run is the inode
/// that was checked: a rename or a symlink swapped in after the check changes nothing.
///
/// A `#!` script is run by its interpreter through /dev/fd/N (execveat(2), NOTES): if `exec_fd`
/// is close-on-exec the interpreter cannot open it and execveat fails with ENOENT. The child
/// then clears FD_CLOEXEC on its own copy (the parent's stays close-on-exec) and tries again,
/// so a binary never inherits the descriptor, a script does.
///
/// Returns the child's pid; or -1 with `*err` set to the errno of fork or of the child's
/// execveat (reported through a close-on-exec pipe, so the call returns once the child has
/// exec'd or failed).
pid_t paird_spawn_fd(int exec_fd, char *const argv[], char *const envp[],
                     int stdin_fd, int out_fd, int *err);

/// prctl(PR_SET_CHILD_SUBREAPER, 1): orphans of our descendants are reparented to us, not to
/// init. Returns 0 or an errno.
int paird_set_child_subreaper(void);
/// openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC) (O_PATH needs _GNU_SOURCE, which Swift's
/// Glibc does not define): a descriptor of the name itself, a symlink not followed, a FIFO not
/// opened for reading (no block). -1 and errno on failure.
int paird_open_path_nofollow(int dirfd, const char *name);

/// pipe2(fds, O_CLOEXEC). 0, or -1 and errno.
int paird_pipe_cloexec(int fds[2]);
#endif
