import Dispatch
import Glibc

/// Starts work that blocks (waits on a git process, the disk, another
/// thread) on a thread of its own.
///
/// Not on Dispatch's global queues: on Linux their pool is as wide as the
/// machine has cores and cannot see a thread blocked in a system call, so
/// on 2 cores two waiting pieces of work (a fetch, a read of the state
/// database) held back a third (the lookups of the paths a sync was about
/// to change) until Dispatch gave up waiting and added a thread, 30–40 ms
/// later, by which time the sync had done the lookups itself one by one.
enum DedicatedThread {
    static func start(_ body: @escaping () -> Void) {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let started = pthread_create(&thread, &attributes, { raw in
            guard let raw else { return nil }
            Unmanaged<Body>.fromOpaque(raw).takeRetainedValue().run()
            return nil
        }, box)
        if started != 0 {
            // Out of threads (EAGAIN): the work still runs, later.
            let body = Unmanaged<Body>.fromOpaque(box).takeRetainedValue()
            DispatchQueue.global().async { body.run() }
        }
    }

    private final class Body: @unchecked Sendable {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }
}
