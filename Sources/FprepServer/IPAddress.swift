import FoundationEssentials
import Glibc

/// An IPv4 or IPv6 address as its bytes (4 or 16, network order), and the
/// kind of network it belongs to, for the webhook policy.
struct IPAddress: Sendable, Equatable, CustomStringConvertible {
    let bytes: [UInt8]

    init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// A numeric host, as `getaddrinfo` with `AI_NUMERICHOST` reads it: so
    /// `127.1` and `2130706433` are 127.0.0.1 here as they are when a name
    /// is resolved. Nil for a name.
    init?(literal host: String) {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return nil }
        defer { freeaddrinfo(list) }
        guard let address = IPAddress(first.pointee) else { return nil }
        self = address
    }

    /// The address of one `getaddrinfo` answer (nil for other families).
    init?(_ info: addrinfo) {
        guard let pointer = info.ai_addr else { return nil }
        switch info.ai_family {
        case AF_INET:
            let address = pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            bytes = withUnsafeBytes(of: address) { Array($0) }
        case AF_INET6:
            let address = pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            bytes = withUnsafeBytes(of: address) { Array($0) }
        default:
            return nil
        }
    }

    /// The kinds of address a webhook may not reach unless allowed.
    enum Kind: String, Sendable {
        case loopback
        case linkLocal = "link-local"
        case privateNetwork = "private"
        case unspecified
        case multicast
        case reserved
        /// A cloud provider's instance metadata service: never reached.
        case metadata = "cloud-metadata"
    }

    /// The kind of network the address belongs to; nil for a public one.
    var kind: Kind? {
        if bytes.count == 4 { return Self.kind(v4: bytes) }
        let high = bytes[0], next = bytes[1]
        if bytes == Self.awsMetadataV6 { return .metadata }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) {
            if bytes[15] == 0 { return .unspecified }
            if bytes[15] == 1 { return .loopback }
        }
        // IPv4 inside IPv6 (::ffff:a.b.c.d mapped, ::a.b.c.d compatible,
        // 64:ff9b::a.b.c.d NAT64) reaches the IPv4 address: judge that one.
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && ((bytes[10] == 0xFF && bytes[11] == 0xFF) || (bytes[10] == 0 && bytes[11] == 0))
            || bytes[0..<12] == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0] {
            return Self.kind(v4: Array(bytes[12..<16]))
        }
        if high == 0xFF { return .multicast }
        if high == 0xFE && next & 0xC0 == 0x80 { return .linkLocal }  // fe80::/10
        if high == 0xFE && next & 0xC0 == 0xC0 { return .privateNetwork }  // fec0::/10, site-local (deprecated)
        if high & 0xFE == 0xFC { return .privateNetwork }  // fc00::/7, unique local
        return nil
    }

    /// fd00:ec2::254, EC2's metadata service over IPv6.
    private static let awsMetadataV6: [UInt8] = [0xFD, 0x00, 0x0E, 0xC2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54]

    private static func kind(v4 b: [UInt8]) -> Kind? {
        switch (b[0], b[1]) {
        case _ where b == [169, 254, 169, 254]: return .metadata
        case (0, _): return .unspecified  // 0.0.0.0/8, "this network"
        case (127, _): return .loopback
        case (10, _), (172, 16...31), (192, 168): return .privateNetwork
        case (100, 64...127): return .privateNetwork  // 100.64.0.0/10, carrier-grade NAT
        case (169, 254): return .linkLocal
        case (224...239, _): return .multicast
        case (240...255, _): return .reserved  // 240.0.0.0/4 and the broadcast address
        default: return nil
        }
    }

    var description: String {
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let done = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &text, socklen_t(text.count)) }
        guard done != nil else { return bytes.map(String.init).joined(separator: ".") }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
