import FoundationEssentials

/// An `http://` or `https://host:port/path` URL: the service's own address
/// (https when it serves TLS) and webhooks' (plain HTTP only).
public struct ServiceURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The path and query, starting with `/`.
    public var path: String
    /// `https`: TLS, the server's certificate verified.
    public var isSecure: Bool

    /// Parses `http[s]://HOST[:PORT][/PATH]`; nil for anything else.
    public init?(_ text: String) {
        let rest: Substring
        if text.hasPrefix("http://") {
            isSecure = false
            rest = text.dropFirst(7)
        } else if text.hasPrefix("https://") {
            isSecure = true
            rest = text.dropFirst(8)
        } else {
            return nil
        }
        let defaultPort = isSecure ? 443 : 80
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        path = slash == rest.endIndex ? "/" : String(rest[slash...])
        if authority.hasPrefix("[") {
            // [v6]:port
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.isEmpty { port = defaultPort } else {
                guard after.hasPrefix(":"), let number = Int(after.dropFirst()) else { return nil }
                port = number
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            guard let number = Int(authority[authority.index(after: colon)...]) else { return nil }
            port = number
        } else {
            host = String(authority)
            port = defaultPort
        }
        guard !host.isEmpty, (1...65535).contains(port),
              !host.contains(where: { $0 == "@" || $0 == " " || $0 == "/" }) else { return nil }
    }

    package init(host: String, port: Int, path: String, secure: Bool = false) {
        self.host = host
        self.port = port
        self.path = path
        isSecure = secure
    }

    /// The same server with another path.
    public func with(path: String) -> ServiceURL { ServiceURL(host: host, port: port, path: path, secure: isSecure) }

    /// `host:port` for the `host` header and the connection pool.
    public var authority: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public var description: String { "\(isSecure ? "https" : "http")://\(authority)\(path == "/" ? "" : path)" }
}
