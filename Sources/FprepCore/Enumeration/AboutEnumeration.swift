// Enumeration and signals, as File Provider has them: a folder's items a page at a time
// (FolderEnumerator), the changes between anchors (ChangeEnumeration), the working set, and the
// durable signal log with what the push service is told (Signals, PushSignals, PushSettings).
// May use: Sync's tree diff (ChangeSet, TreeLookup), Placeholders, State, Support, FprepGit.
