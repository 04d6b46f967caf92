import Dispatch
import Glibc

/// A thread of its own, for work that blocks: a loop that waits on a
/// socket or a queue, a git process, the disk, other work.
///
/// Never one of Dispatch's global queues for such work: on Linux their pool
/// is as wide as the machine has cores and cannot see a thread blocked in a
/// system call, so on 2 cores two waiting pieces of work (a fetch, a read
/// of the state database) held back a third (the lookups of the paths a
/// sync was about to change) until Dispatch gave up waiting and added a
/// thread, 30–40 ms later; past its limit of threads, for ever.
public final class BlockingThread: @unchecked Sendable {
    private final class Body: @unchecked Sendable {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }

    private var handle = pthread_t()

    /// Starts `run` on a thread the caller joins (`join`).
    public init(_ run: @escaping @Sendable () -> Void) throws {
        let body = Unmanaged.passRetained(Body(run)).toOpaque()
        let result = pthread_create(&handle, nil, Self.entry, body)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(body).release()
            throw FprepError("cannot start a thread: \(String(cString: strerror(result)))")
        }
    }

    public func join() { _ = pthread_join(handle, nil) }

    /// Starts `run` on a thread nobody joins; the caller learns of its end
    /// its own way (a semaphore, a group). Out of threads, it still runs,
    /// on Dispatch's pool, later.
    public static func start(_ run: @escaping () -> Void) {
        let body = Unmanaged.passRetained(Body(run)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        if pthread_create(&thread, &attributes, entry, body) != 0 {
            let work = Unmanaged<Body>.fromOpaque(body).takeRetainedValue()
            DispatchQueue.global().async { work.run() }
        }
    }

    private static let entry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
        guard let raw else { return nil }
        Unmanaged<Body>.fromOpaque(raw).takeRetainedValue().run()
        return nil
    }
}
