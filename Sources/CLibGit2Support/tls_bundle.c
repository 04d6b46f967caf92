/*
 * libgit2 as Debian builds it uses mbedTLS, and its one-time init parses
 * the whole system CA bundle (/etc/ssl/certs/ca-certificates.crt, some 140
 * certificates): about 5 ms on every fprep command that opens a replica.
 * fprep never uses libgit2's network transports (every fetch and push goes
 * through the git command), so those certificates are never consulted.
 *
 * fprep links libgit2 and mbedTLS from their static archives with
 * --wrap for these two functions (Package.swift): libgit2's calls land
 * here, and no bundle is read. Were libgit2's HTTPS transport ever used, it
 * would trust no certificate authority and refuse every server: it fails
 * closed, never open.
 */
struct mbedtls_x509_crt;

int __wrap_mbedtls_x509_crt_parse_file(struct mbedtls_x509_crt *chain, const char *path);
int __wrap_mbedtls_x509_crt_parse_path(struct mbedtls_x509_crt *chain, const char *path);

int __wrap_mbedtls_x509_crt_parse_file(struct mbedtls_x509_crt *chain, const char *path)
{
    (void)chain;
    (void)path;
    return 0;
}

int __wrap_mbedtls_x509_crt_parse_path(struct mbedtls_x509_crt *chain, const char *path)
{
    (void)chain;
    (void)path;
    return 0;
}
