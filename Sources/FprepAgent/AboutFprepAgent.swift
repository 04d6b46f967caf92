// FprepAgent: hydration on first access (fprep agent) — the fanotify group and its marks (root),
// the event loop, the per-replica worker that does everything else as the replica's owner, the
// registry and status of a long-running agent.
// May use: FprepCore, CFprepSys.
