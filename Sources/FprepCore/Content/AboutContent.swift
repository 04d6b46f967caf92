// Content in and out of placeholders: materialize and evict (ContentOperations, journaled),
// and the agent's hydration in place (InPlaceHydration).
// May use: Placeholders, State, Support, FprepGit (fetches through its transport).
