/* fanotify change events: what programs do to the files of a filesystem
 * (create, delete, move, attribute change, close after writing), each
 * reported as the folder it happened in (a file handle) and the name.
 * The agent's worker follows its replica's changes this way to sync by
 * itself. */
#define _GNU_SOURCE
#include "CFprepSys.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/fanotify.h>
#include <unistd.h>

int fprep_changes_init(void) {
    /* Unprivileged: the replica's owner follows its own folders. A bounded
     * queue: an overflow is reported (FAN_Q_OVERFLOW), and the next sync
     * looks at everything, as it always does. */
    return fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME, O_RDONLY | O_LARGEFILE);
}

int fprep_changes_mark_folder(int group, int dirfd, const char *path) {
    /* An inode mark per folder, never a filesystem mark: a reader waiting
     * on the agent's pre-content event pins every filesystem mark of any
     * group, and the group's release then waits for that reader, so a
     * killed agent could not exit until its keeper answered (deadlock). */
    /* FAN_MODIFY too: the change journal must know of a file written and
     * not yet closed (the queue merges a writer's repeated events). */
    uint64_t mask = FAN_CLOSE_WRITE | FAN_MODIFY | FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_ATTRIB
                    | FAN_ONDIR | FAN_EVENT_ON_CHILD;
    return fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_ONLYDIR | FAN_MARK_DONT_FOLLOW, mask, dirfd, path);
}

int fprep_changes_folder_handle(int dirfd, const char *path, struct fprep_change_event *event) {
    struct {
        struct file_handle handle;
        unsigned char bytes[sizeof event->handle];
    } found;
    found.handle.handle_bytes = sizeof event->handle;
    int mount_id;
    if (name_to_handle_at(dirfd, path, &found.handle, &mount_id, 0) != 0) return -1;
    event->handle_type = found.handle.handle_type;
    event->handle_bytes = found.handle.handle_bytes;
    memcpy(event->handle, found.handle.f_handle, found.handle.handle_bytes);
    event->has_folder = 1;
    return 0;
}

ssize_t fprep_changes_read(int group, struct fprep_change_event *events, size_t capacity) {
    char buffer[8192] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
    ssize_t length = read(group, buffer, sizeof buffer);
    if (length < 0) return -1;
    size_t count = 0;
    struct fanotify_event_metadata *meta = (struct fanotify_event_metadata *)buffer;
    size_t remaining = (size_t)length;
    while (FAN_EVENT_OK(meta, remaining)) {
        if (meta->vers != FANOTIFY_METADATA_VERSION) { errno = EPROTO; return -1; }
        if (meta->fd >= 0) close(meta->fd);
        if (count == capacity) {
            /* Never reached with the capacity asked for (a whole read of
             * the smallest events fits); if it were, a lost event is an
             * overflow, and the follower looks at everything again. */
            events[capacity - 1].mask |= FAN_Q_OVERFLOW;
        } else {
            struct fprep_change_event *event = &events[count++];
            memset(event, 0, sizeof *event);
            event->mask = meta->mask;
            event->pid = meta->pid;
            size_t info = meta->metadata_len;
            while (info + sizeof(struct fanotify_event_info_header) <= meta->event_len) {
                struct fanotify_event_info_header *header = (struct fanotify_event_info_header *)((char *)meta + info);
                if (header->len == 0 || info + header->len > meta->event_len) break;
                if ((header->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME || header->info_type == FAN_EVENT_INFO_TYPE_DFID)
                    && header->len >= sizeof(struct fanotify_event_info_fid) + sizeof(struct file_handle)) {
                    struct fanotify_event_info_fid *fid = (struct fanotify_event_info_fid *)header;
                    struct file_handle *handle = (struct file_handle *)fid->handle;
                    size_t fixed = sizeof(struct fanotify_event_info_fid) + sizeof(struct file_handle);
                    if (handle->handle_bytes <= sizeof event->handle && fixed + handle->handle_bytes <= header->len) {
                        event->handle_type = handle->handle_type;
                        event->handle_bytes = handle->handle_bytes;
                        memcpy(event->handle, handle->f_handle, handle->handle_bytes);
                        event->has_folder = 1;
                        if (header->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME) {
                            const char *name = (const char *)handle->f_handle + handle->handle_bytes;
                            size_t room = header->len - fixed - handle->handle_bytes;
                            size_t name_length = strnlen(name, room);
                            if (name_length < sizeof event->name && !(name_length == 1 && name[0] == '.')) {
                                memcpy(event->name, name, name_length);
                                event->name_length = (uint32_t)name_length;
                            }
                        }
                    }
                }
                info += header->len;
            }
        }
        meta = FAN_EVENT_NEXT(meta, remaining);
    }
    return (ssize_t)count;
}

int fprep_open_for_writing_elsewhere(int dirfd, const char *path) {
    int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    /* A read lease is granted only while no one has the file open for
     * writing: the kernel's own answer, with no walk of /proc. */
    int result = 0;
    if (fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
        result = (errno == EAGAIN || errno == EBUSY) ? 1 : -1;
    } else {
        fcntl(fd, F_SETLEASE, F_UNLCK);
    }
    int error = errno;
    close(fd);
    errno = error;
    return result;
}
