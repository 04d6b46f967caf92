// State and journal: the replica's SQLite store (StateStore on Database), the journal of
// operations a crash leaves for the next command to settle, the replica's lock, the checks that
// find a damaged store (StateFileCheck), its rebuild (Repair), and what a full disk means
// (StorageFailure).
// May use: Support, FprepGit, CSQLite. Placeholders and everything above use it.
