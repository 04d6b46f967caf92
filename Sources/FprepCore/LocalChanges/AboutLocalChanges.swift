// What changed on this device: the stat scan of the index (LocalChanges, with the untracked
// cache; git's ignore rules for untracked items, IgnoreRules; the scan of only what the
// agent's change journal names, JournalScan, from the record the last scan left,
// JournalRecord), the commit of those changes
// (LocalCommit), and what git itself did in the replica
// (GitNeighbour).
// May use: Placeholders, Content's placeholder checks and agent link, State, Support, FprepGit.
