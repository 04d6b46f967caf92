import FoundationEssentials
import Glibc

/// One short, blocking, best-effort HTTP request, for the hook: it must not
/// hold a push up, so the whole exchange (name lookup aside: the service's
/// address is a literal in practice) has one deadline, and every failure is
/// only reported, never thrown.
public enum Poke {
    /// Pokes the services at `addresses` in turn until one takes it: any
    /// instance dispatches every push, and one that stopped (its address
    /// left by a kill) refuses at once. True when one answered 2xx.
    @discardableResult
    public static func first(of addresses: [String], bearer: String, timeoutMilliseconds: Int) -> Bool {
        for address in addresses {
            guard let url = ServiceURL(address) else { continue }
            if send(url.with(path: "/v1/outbox/poke"), bearer: bearer, timeoutMilliseconds: timeoutMilliseconds) { return true }
        }
        return false
    }

    /// Sends `POST url` with a bearer token; true when the service answered 2xx
    /// within `timeoutMilliseconds`.
    @discardableResult
    public static func send(_ url: ServiceURL, bearer: String, timeoutMilliseconds: Int) -> Bool {
        // The service records a plain loopback address for the hook even when it serves TLS.
        guard !url.isSecure else { return false }
        let deadline = now() + Double(timeoutMilliseconds) / 1000
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(url.host, String(url.port), &hints, &list) == 0, let first = list else { return false }
        defer { freeaddrinfo(list) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) != 0 {
            guard errno == EINPROGRESS, wait(fd, for: Int16(POLLOUT), until: deadline) else { return false }
            var failure: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length) == 0, failure == 0 else { return false }
        }
        let request = "POST \(url.path) HTTP/1.1\r\nHost: \(url.authority)\r\nAuthorization: Bearer \(bearer)\r\n"
            + "Content-Length: 0\r\nConnection: close\r\n\r\n"
        var bytes = Array(request.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if count > 0 { sent += count; continue }
            guard count < 0, errno == EAGAIN || errno == EINTR, wait(fd, for: Int16(POLLOUT), until: deadline) else { return false }
        }
        // "HTTP/1.1 202" is all there is to read.
        var answer = [UInt8](repeating: 0, count: 64)
        var received = 0
        while received < 12 {
            guard wait(fd, for: Int16(POLLIN), until: deadline) else { return false }
            let count = answer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + received, $0.count - received, 0) }
            if count == 0 { break }
            if count < 0 { if errno == EAGAIN || errno == EINTR { continue } else { return false } }
            received += count
        }
        guard received >= 12 else { return false }
        return answer[9] == UInt8(ascii: "2")
    }

    private static func wait(_ fd: Int32, for events: Int16, until deadline: Double) -> Bool {
        while true {
            let left = Int32(max(0, (deadline - now()) * 1000))
            guard left > 0 else { return false }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, left)
            if ready > 0 { return true }
            if ready == 0 || errno != EINTR { return false }
        }
    }

    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
