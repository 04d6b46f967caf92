// FprepMirror: `fprep serve --mirror URL`, the push service of a hosted
// remote (GitHub, GitLab, Gitea, Forgejo) where no server-side hook can run.
// The host's push webhook (`WebhookVerifier`, `WebhookEndpoint`) and a
// periodic sweep queue a pass (`MirrorWorker`) that fetches the host into a
// local bare mirror (`MirrorRepository`), publishes the pushed blobs' sizes
// to the host's size manifest (`ManifestPublisher`) and records push signals
// in the mirror's outbox as the post-receive hook does (`MirrorPass`). The
// service in FprepServer delivers them; it knows this module only as a
// `ServiceCompanion` (`HostedMirror`).
