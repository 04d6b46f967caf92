#ifndef FPREP_CLIBCRYPTO_SHIM_H
#define FPREP_CLIBCRYPTO_SHIM_H
#include <openssl/evp.h>

/* SHA-1 fed piece by piece (the index file's trailing checksum, computed
 * as the file is written). NULL when OpenSSL cannot make one. */
static inline void *fprep_sha1_begin(void) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context && EVP_DigestInit_ex(context, EVP_sha1(), NULL) != 1) {
        EVP_MD_CTX_free(context);
        return NULL;
    }
    return context;
}
static inline int fprep_sha1_update(void *context, const void *data, size_t length) {
    return EVP_DigestUpdate((EVP_MD_CTX *)context, data, length) == 1 ? 0 : -1;
}
/* Writes the 20 bytes and frees the context; 0 on success. */
static inline int fprep_sha1_end(void *context, unsigned char out[20]) {
    unsigned int written = 0;
    int ok = EVP_DigestFinal_ex((EVP_MD_CTX *)context, out, &written) == 1 && written == 20;
    EVP_MD_CTX_free((EVP_MD_CTX *)context);
    return ok ? 0 : -1;
}
#endif
