// Support: what every part of the core uses and that knows nothing of replicas —
// paths as bytes (RepoPath), file-system calls relative to an open folder (FileSystem), the
// errors users see (FprepError), console output, progress, JSON text and tracing.
// May use: CFprepSys, FprepGit's types, the standard library. Nothing else in FprepCore.
