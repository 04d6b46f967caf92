// Content in and out of placeholders: materialize and evict (ContentOperations, journaled),
// pins (PinSet: always materialized), the disk budget (DiskBudget: evict least recently used),
// the agent's hydration in place (InPlaceHydration), and the link that has the agent watch
// placeholders before commands make them (AgentLink).
// May use: Placeholders, State, Support, FprepGit (fetches through its transport).
