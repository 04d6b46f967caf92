/*
 * fprep uses libgit2 for its object database, refs and index; every fetch
 * and push goes through the git command. libgit2's one-time init would
 * still set up its network stack on every fprep command: its mbedTLS
 * stream seeds a random generator from the HAVEGE entropy source and
 * parses the whole system CA bundle (some 140 certificates), and its SSH
 * transport initializes libssh2 and OpenSSL. That cost 5.5 ms a command,
 * longer than the tree diff of a sync.
 *
 * fprep links libgit2 from its static archive with --wrap for these two
 * init functions (Package.swift), so libgit2's init calls land here and
 * skip that setup. Were libgit2's HTTPS or SSH transport ever used, it
 * would find no TLS stream registered and fail: closed, never open.
 */
int __wrap_git_mbedtls_stream_global_init(void);
int __wrap_git_transport_ssh_global_init(void);

int __wrap_git_mbedtls_stream_global_init(void)
{
    return 0;
}

int __wrap_git_transport_ssh_global_init(void)
{
    return 0;
}
