// FprepCore: the replica engine, one folder per concern. From the bottom up: Support (paths,
// files, errors), State (store, journal, lock), Placeholders (what a dataless file is), Content
// (materialize, evict, hydration), LocalChanges (the scan and its commit), Remote (clone, remotes,
// size manifest), Sync (merge, apply, push), Enumeration (listings, changes, signals), and Replica
// (the type they all extend, and commands that need several of them).
// May use: FprepGit, CFprepSys, CSQLite, CLibCrypto. Used by FprepAgent, FprepServer, FprepCLI.
