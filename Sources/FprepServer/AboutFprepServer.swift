// FprepServer: push signals — the push service (HTTP/2 and TLS on SwiftNIO,
// device registration, rules, delivery, APNs) and the device-side watcher.
// May use: FprepPush, FprepCore, FprepGit, SwiftNIO and its HTTP/2 and TLS packages, swift-crypto.
