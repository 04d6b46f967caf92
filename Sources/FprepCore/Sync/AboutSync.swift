// Sync and merge: the sync itself (Sync: scan, commit, fetch, merge, lay out, push; its applier
// and journal), the three-way tree merge (TreeMerge), the tree diff with renames (ChangeSet), the
// rules every tree entry obeys (TreeEntryRules), content fetched for changed files, and the dry run.
// May use: LocalChanges, Placeholders, Content, Enumeration's signals, Remote's size manifest,
// State, Support, FprepGit.
