// FprepFullCLI: the commands that run the network stack — `serve` (and its admin commands),
// `watch`, `agent`, `changes --follow` — and the completion scripts, which need every command.
// They are built into `fprep-full` only; `fprep` hands them over to it (FprepCLI's FullCommands).
// May use: FprepCLI, FprepCore, FprepAgent, FprepServer, FprepServicePostgres, FprepMirror.
