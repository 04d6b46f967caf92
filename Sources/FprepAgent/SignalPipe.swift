import FprepCore
import Glibc

/// SIGTERM and SIGINT ask the loop to stop: the handler writes a byte to
/// the pipe the loop waits on.
enum SignalPipe {
    nonisolated(unsafe) private static var writeFD: Int32 = -1
    nonisolated(unsafe) private(set) static var stopRequested = false

    static func install() throws -> (read: Int32, write: Int32) {
        let fds = try makePipe()
        writeFD = fds.write
        for number in [SIGTERM, SIGINT] {
            signal(number) { _ in
                SignalPipe.stopRequested = true
                var byte: UInt8 = 0
                _ = Glibc.write(SignalPipe.writeFD, &byte, 1)
            }
        }
        return fds
    }

    /// A pipe to wake a loop with: both ends non-blocking, closed on exec.
    static func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            throw FprepError("cannot start the agent: pipe: \(String(cString: strerror(errno)))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        return (fds[0], fds[1])
    }

    /// Wakes whoever waits on the pipe of `install`, without asking it to stop.
    static func poke() {
        var byte: UInt8 = 1
        _ = Glibc.write(writeFD, &byte, 1)
    }
}
