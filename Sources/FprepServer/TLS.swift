import FprepCore
import NIOCore
import NIOSSL

/// The TLS settings fprep uses, on swift-nio-ssl (BoringSSL): a client that
/// verifies the peer against the system's trust store or one CA file, and a
/// server with a certificate chain and key from PEM files.
public enum TLS {
    /// A client context: certificates checked (chain and name) against the
    /// system's trust store, or only against the CA certificates in `caFile`
    /// (PEM); `protocols` are offered by ALPN.
    public static func clientContext(caFile: String?, protocols: [String]) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.applicationProtocols = protocols
        // A client that closes has read all it wants: it does not wait 5 s
        // (NIO's default) for the peer's close_notify (a server streaming
        // events may not read it soon), which held `fprep watch` up at exit.
        configuration.shutdownTimeout = .milliseconds(200)
        if let caFile {
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(caFile)
            } catch {
                throw FprepError(.usage, "cannot read CA certificates from '\(caFile)' (a PEM file with one or more certificates)")
            }
            guard !certificates.isEmpty else { throw FprepError(.usage, "'\(caFile)' holds no PEM certificate") }
            configuration.trustRoots = .certificates(certificates)
        }
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw FprepError("cannot set up TLS: \(error)")
        }
    }

    /// A server context from a PEM certificate chain and its PEM private key;
    /// `protocols` are chosen from by ALPN (the client's preference first).
    public static func serverContext(certificateFile: String, keyFile: String, protocols: [String]) throws -> NIOSSLContext {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateFile)
        } catch {
            throw FprepError(.usage, "cannot read the certificate '\(certificateFile)' (PEM, the server's certificate first)")
        }
        guard !chain.isEmpty else { throw FprepError(.usage, "'\(certificateFile)' holds no PEM certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyFile, format: .pem)
        } catch {
            throw FprepError(.usage, "cannot read the private key '\(keyFile)' (PEM)")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                                    privateKey: .privateKey(key))
        configuration.applicationProtocols = protocols
        // The service stopping closes every connection: a second is enough for the peers' close_notify.
        configuration.shutdownTimeout = .seconds(1)
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw FprepError(.usage, "the certificate '\(certificateFile)' and key '\(keyFile)' do not make a TLS server: \(error)")
        }
    }

    /// The client handler for `host`: SNI and the name check use the host
    /// name; an address literal is checked against the certificate's IP
    /// addresses instead (SNI carries no addresses).
    static func clientHandler(_ context: NIOSSLContext, host: String) throws -> NIOSSLClientHandler {
        let isAddress = IPAddress(literal: host) != nil
        return try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host)
    }

    /// One line for a failure that TLS caused, or nil when `error` is not TLS's.
    static func explain(_ error: any Error, peer: String) -> String? {
        if let error = error as? NIOSSLError {
            switch error {
            case .handshakeFailed(let cause):
                let text = "\(cause)"
                if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
                    return "the TLS certificate of \(peer) is not trusted (pass the CA that signed it with --ca FILE, or use a certificate the system trusts)"
                }
                return "the TLS handshake with \(peer) failed: \(text)"
            case .unableToValidateCertificate, .cannotMatchULabel:
                return "the TLS certificate of \(peer) does not name that host"
            case .uncleanShutdown:
                return "\(peer) closed the TLS connection uncleanly"
            default:
                return "TLS with \(peer) failed: \(error)"
            }
        }
        if error is NIOSSLExtraError { return "TLS with \(peer) failed: \(error)" }
        return nil
    }
}
