// FprepPush: the server side's light half of push signals — the hook's outbox and spool, the
// poke that wakes the service, a remote's push folder and the service's URL. Every `fprep`
// command may run it (the hook on each push), so it has no network stack: the service itself
// (FprepServer) and the commands that run it live in `fprep-full`.
// May use: FprepCore, FprepGit.
