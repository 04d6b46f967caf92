import Dispatch
import FoundationEssentials
import FprepPush
import Glibc
import NIOCore

/// The one address a webhook delivery connects to: the URL's host resolved
/// once, every address it gave checked against the policy, the first taken.
/// The client then connects to that address (the name is sent only in the
/// `host` header), so a name that resolves to a public address when checked
/// and to a private one a moment later (DNS rebinding) cannot redirect it.
enum WebhookTarget {
    /// What came of choosing the address for a delivery.
    enum Choice: Sendable {
        case connect(SocketAddress)
        /// The policy refuses it: the delivery is dropped, not retried.
        case refused(String)
        /// The name did not resolve: worth another try later.
        case unresolved(String)
    }

    static func choose(for url: ServiceURL, policy: WebhookPolicy) async -> Choice {
        let addresses: [IPAddress]
        if let literal = IPAddress(literal: url.host) {
            addresses = [literal]
        } else {
            switch await resolve(url.host) {
            case .success(let found): addresses = found
            case .failure(let error): return .unresolved(error.description)
            }
        }
        guard let first = addresses.first else { return .unresolved("\(url.host) has no address") }
        for address in addresses {
            if let reason = policy.refusal(of: address, host: url.host) { return .refused(reason) }
        }
        do {
            return .connect(try SocketAddress(packedIPAddress: ByteBuffer(bytes: first.bytes), port: url.port))
        } catch {
            return .unresolved("cannot use \(first): \(error)")
        }
    }

    /// `getaddrinfo` on a thread of its own (it blocks), once.
    private static func resolve(_ host: String) async -> Result<[IPAddress], HTTPClientError> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var hints = addrinfo()
                hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
                var list: UnsafeMutablePointer<addrinfo>?
                let status = getaddrinfo(host, nil, &hints, &list)
                guard status == 0 else {
                    continuation.resume(returning: .failure(HTTPClientError("cannot resolve \(host): \(String(cString: gai_strerror(status)))")))
                    return
                }
                defer { freeaddrinfo(list) }
                var found: [IPAddress] = []
                var next = list
                while let entry = next {
                    if let address = IPAddress(entry.pointee), !found.contains(address) { found.append(address) }
                    next = entry.pointee.ai_next
                }
                continuation.resume(returning: .success(found))
            }
        }
    }
}
