// The remote and its size manifest: making a replica (Cloner), making or adopting a remote
// (Remote, RemoteAdoption, RemoteInfo, TreeImporter, the hooks it installs), and the sizes of
// blobs a partial clone cannot see (SizeManifest, SizePublication, PostReceive).
// May use: Placeholders (clone's layout), State, Support, FprepGit.
