import FoundationEssentials

/// Where the service may POST a device's webhook (issue 13.3): only to
/// public addresses, so that a device cannot make it reach the service's own
/// host, its network, or a cloud metadata service. Loopback, link-local,
/// private (RFC 1918, 100.64/10, fc00::/7), unspecified, multicast and
/// reserved addresses are refused unless the operator allowed the URL's
/// host (`fprep serve --allow-webhook-host HOST`); cloud metadata addresses
/// (169.254.169.254, fd00:ec2::254) are refused even then. The check is on
/// the addresses the host resolves to, and the connection goes to the
/// checked address (`WebhookTarget`), never to the name again.
public struct WebhookPolicy: Sendable, Equatable {
    /// Hosts (names or literal addresses, lowercased) whose addresses are
    /// not checked but for metadata.
    public private(set) var allowedHosts: Set<String> = []

    public init(allowedHosts: [String] = []) {
        self.allowedHosts = Set(allowedHosts.map(Self.normalized))
    }

    /// `[::1]` → `::1`, lowercased: how hosts are compared.
    static func normalized(_ host: String) -> String {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return bare.lowercased()
    }

    /// Whether the operator allowed `host`.
    func allows(host: String) -> Bool { allowedHosts.contains(Self.normalized(host)) }

    /// Why a webhook to `host` may not go to `address`, or nil when it may.
    func refusal(of address: IPAddress, host: String) -> String? {
        guard let kind = address.kind else { return nil }
        if kind == .metadata { return "\(host) is \(address), a cloud metadata address, which webhooks never reach" }
        if allows(host: host) { return nil }
        let resolved = IPAddress(literal: host) == address ? "" : " (\(host) resolves to it)"
        return "\(address) is a \(kind.rawValue) address\(resolved); webhooks go to public addresses only, "
            + "unless 'fprep serve' is started with --allow-webhook-host \(host)"
    }

    /// At registration: why a webhook URL whose host is a literal address
    /// is refused, or nil (a name is checked when it is resolved, at each delivery).
    func refusal(ofLiteral host: String) -> String? {
        guard let address = IPAddress(literal: host) else { return nil }
        return refusal(of: address, host: host)
    }
}
