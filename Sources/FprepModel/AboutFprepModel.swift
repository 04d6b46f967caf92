// FprepModel: the randomized model test's engine — a world of two replicas and a remote, the
// actions on them, and the checks after each step; it drives the fprep binary and git.
// May use: Foundation and SQLite only (it tests the binary from outside).
