#ifndef FPREP_CLIBCRYPTO_SHIM_H
#define FPREP_CLIBCRYPTO_SHIM_H
#include <openssl/evp.h>

/* SHA-1 of one buffer (the index file's trailing checksum); 0 on success. */
static inline int fprep_sha1(const void *data, size_t length, unsigned char out[20]) {
    unsigned int written = 0;
    return EVP_Digest(data, length, out, &written, EVP_sha1(), NULL) == 1 && written == 20 ? 0 : -1;
}
#endif
