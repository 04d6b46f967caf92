#include "CFprepSys.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* A pack's objects start after a 12-byte header ("PACK", version, count);
 * each with a header of varint bytes: type in bits 4-6 of the first, size in
 * the rest, then the zlib stream of its content. */
int fprep_pack_first_object(const char *path, char *line, size_t capacity) {
    if (capacity == 0) return -1;
    line[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    unsigned char buffer[4096];
    ssize_t got = pread(fd, buffer, sizeof buffer, 0);
    close(fd);
    if (got < 13 || memcmp(buffer, "PACK", 4) != 0) return -1;
    int type = (buffer[12] >> 4) & 7;
    size_t at = 12;
    while (at < (size_t)got && (buffer[at] & 0x80)) at++;
    at++;
    if (at >= (size_t)got) return type;

    z_stream stream;
    memset(&stream, 0, sizeof stream);
    if (inflateInit(&stream) != Z_OK) return type;
    stream.next_in = buffer + at;
    stream.avail_in = (uInt)((size_t)got - at);
    stream.next_out = (unsigned char *)line;
    stream.avail_out = (uInt)(capacity - 1);
    int status = inflate(&stream, Z_SYNC_FLUSH);
    size_t length = (capacity - 1) - stream.avail_out;
    inflateEnd(&stream);
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) length = 0;
    line[length] = 0;
    char *end = memchr(line, '\n', length);
    if (end) *end = 0;
    return type;
}
