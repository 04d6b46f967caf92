// FprepCLI: the command line, one file per command (ArgumentParser), and how results and errors
// are printed (Support: one line per error, --json, -q/-v).
// May use: FprepCore, FprepAgent, FprepServer, FprepGit's errors. Holds no engine logic.
