import Foundation
import Glibc

/// A new ext4 filesystem in a sparse image file, mounted on a folder: where
/// a timed step that creates a tree runs with `--fresh-filesystems`. On a
/// filesystem that just deleted many files, ext4 skips inodes freed in the
/// last minutes (`recently_deleted`, up to 6 minutes once their table block
/// is dirty) and reads their table blocks to tell, so creating 10^5 files
/// took 2.8 s in one state of the disk and 12.8 s in another, whichever
/// side deleted last paying. A new filesystem per side gives each the same
/// start. Needs root (losetup, mount) and mkfs.ext4.
///
/// The image is attached with direct I/O (`losetup --direct-io=on`): a loop
/// device that goes through the page cache of its image serves one read
/// at a time, which no disk does. 1,000 cold lookups took 180–220 ms
/// there whether 1 or 64 threads asked, against 220 ms with 1 and 120 ms
/// with 16 on the disk under it (and on the direct-I/O loop device: 233 /
/// 119 ms), so a step that reads in parallel was timed on a device unlike any
/// a user has.
struct FreshFilesystem {
    let mountPoint: String
    let image: String
    let subprocess: Subprocess

    /// Makes and mounts it: `inodes` inodes, `bytes` of space (sparse).
    init(mountPoint: String, inodes: Int, bytes: Int64, subprocess: Subprocess) throws {
        self.mountPoint = mountPoint
        image = mountPoint + ".img"
        self.subprocess = subprocess
        FreshFilesystem.unmount(mountPoint, image: image, subprocess: subprocess)
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let fd = open(image, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0, ftruncate(fd, off_t(bytes)) == 0 else {
            if fd >= 0 { close(fd) }
            throw BenchError.message("cannot make the image \(image): \(errnoText())")
        }
        close(fd)
        // Inode tables and journal written now, not by the kernel's lazy
        // init thread while a step is timed.
        try subprocess.run(Command(["mkfs.ext4", "-q", "-F", "-N", String(inodes),
                                    "-E", "lazy_itable_init=0,lazy_journal_init=0", image]))
        let device = try subprocess.run(Command(["losetup", "--direct-io=on", "--find", "--show", image])).stdoutText
            .trimmingCharacters(in: .whitespacesAndNewlines)
        do {
            try subprocess.run(Command(["mount", device, mountPoint]))
        } catch {
            _ = try? subprocess.run(Command(["losetup", "--detach", device]))
            throw error
        }
    }

    /// Unmounts and removes the image.
    func remove() {
        FreshFilesystem.unmount(mountPoint, image: image, subprocess: subprocess)
    }

    /// Also what an earlier run left mounted or attached (a bench killed midway).
    private static func unmount(_ mountPoint: String, image: String, subprocess: Subprocess) {
        _ = try? subprocess.run(Command(["umount", mountPoint]))
        let attached = (try? subprocess.run(Command(["losetup", "--noheadings", "--output", "NAME", "--associated", image])).stdoutText) ?? ""
        for device in attached.split(separator: "\n") where !device.isEmpty {
            _ = try? subprocess.run(Command(["losetup", "--detach", String(device)]))
        }
        unlink(image)
    }
}
