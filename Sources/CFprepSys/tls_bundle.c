/*
 * libgit2 as Debian builds it uses mbedTLS, and its one-time init parses
 * the whole system CA bundle (/etc/ssl/certs/ca-certificates.crt, some 140
 * certificates): about 5 ms on every fprep command that opens a replica.
 * fprep never uses libgit2's network transports (every fetch and push goes
 * through the git command), so those certificates are never consulted.
 *
 * These definitions take the place of mbedTLS's for libgit2: the
 * executable's exported symbols come first in the dynamic linker's lookup,
 * so libgit2's call lands here and no bundle is read. Were libgit2's HTTPS
 * transport ever used, it would trust no certificate authority and refuse
 * every server: it fails closed, never open. A libgit2 built on OpenSSL
 * never calls these, and nothing changes.
 */
struct mbedtls_x509_crt;

int mbedtls_x509_crt_parse_file(struct mbedtls_x509_crt *chain, const char *path);
int mbedtls_x509_crt_parse_path(struct mbedtls_x509_crt *chain, const char *path);

int mbedtls_x509_crt_parse_file(struct mbedtls_x509_crt *chain, const char *path)
{
    (void)chain;
    (void)path;
    return 0;
}

int mbedtls_x509_crt_parse_path(struct mbedtls_x509_crt *chain, const char *path)
{
    (void)chain;
    (void)path;
    return 0;
}
