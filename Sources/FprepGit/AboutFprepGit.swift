// FprepGit: the only module that imports libgit2 — repositories, objects, trees and their diff,
// merges, git's index file read in place (split index included: SplitIndex), and the git command
// as transport (fetch, push).
// May use: CLibGit2, CLibGit2Support, CLibCrypto, CFprepSys. Knows nothing of replicas.
