// Layout and placeholders: what a dataless file is and how it is made, checked and replaced —
// the layout of a tree as placeholders (LayoutPlan, PlaceholderLayout), the state of an item from
// its stat (ItemState), bytes written into a placeholder (WrittenPlaceholder), the names fprep
// derives (DerivedNames), replacing a user's file without losing a write (SafeReplace), sizes
// learned late (UnknownSizes) and the moment placeholders were last all looked at (PlaceholderCheck).
// May use: State, Support, FprepGit, CFprepSys.
