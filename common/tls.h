// Transport security for every gRPC channel of a job: optional TLS with
// mutual authentication (mTLS).
//
// Three flags, each with an environment default so one container image works
// in every role (flags win over the environment):
//
//   --tls_cert  (SHARDPS_TLS_CERT)  this process's certificate chain, PEM
//   --tls_key   (SHARDPS_TLS_KEY)   its private key, PEM
//   --tls_ca    (SHARDPS_TLS_CA)    the CA certificate(s) peers must chain to
//
// All three empty: plaintext (insecure) channels, as before. Any one set: all
// three must be set, else INVALID_ARGUMENT. With TLS every process uses its one
// certificate both ways: servers (ps_server, ps_scheduler) require and verify
// a client certificate signed by --tls_ca
// (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY), and clients
// present theirs and verify the server's against --tls_ca. A peer with a
// certificate from another CA, or with none (plaintext), fails the handshake:
// its calls end with UNAVAILABLE and the server keeps serving everyone else.
//
// Host names. A client checks that the server's certificate names the host it
// dialled (the host part of host:port), by subjectAltName: a local job dials
// 127.0.0.1, so local certificates need "IP:127.0.0.1" (add "DNS:localhost"
// too). On a cluster every server certificate must carry a SAN for the address
// peers dial: the scheduler's Service name (DNS:ps-scheduler in deploy/k8s),
// the servers' advertised addresses (DNS:ps-server-0.ps-server, ... : list
// each one, gRPC refuses a wildcard over a one-label domain such as
// *.ps-server) and IP:127.0.0.1 for the ps_health probes. One certificate with
// all of those SANs, shared by every pod, is the simplest setup. There is no
// target-name override: the name checked is always the one dialled. See
// docs/operations.md ("TLS") for an openssl recipe.
//
// Message sizes (independent of TLS): every server enforces a maximum
// message size of the job config's cluster.max_message_bytes (default
// 64 MiB) on what it receives and sends; a larger message fails with
// RESOURCE_EXHAUSTED and changes nothing, the server carries on. Clients
// split pulls and pushes below that limit (docs/design.md, wire protocol).
//
// Usage: ps_scheduler, ps_server, ps_worker and ps_status call
// InitTlsFromFlags() right after InitProcess and exit with status 2 on an
// error, so a missing or malformed certificate is a startup error naming the
// file, never a later hang (ps_health gets the same error from CheckHealth).
// After that the *FromFlags functions are cheap (the files are read and checked
// once and cached; the cache is refreshed if the flag values change, which only
// tests do).
//
// Thread-safety: every function here is thread-safe.
#ifndef SHARDPS_COMMON_TLS_H_
#define SHARDPS_COMMON_TLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);

namespace shardps {

// Paths of the three PEM files. All empty = no TLS.
struct TlsFiles {
  std::string cert;  // Certificate (chain) presented to peers.
  std::string key;   // Private key of `cert`.
  std::string ca;    // CA certificate(s) a peer's certificate must chain to.

  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
  bool operator==(const TlsFiles& o) const { return cert == o.cert && key == o.key && ca == o.ca; }
};

// The flags' values (not checked; see CheckTlsFiles).
TlsFiles TlsFilesFromFlags();

// OK for all-empty files. Otherwise reads and checks the three files:
// INVALID_ARGUMENT naming the flag and path if only some are set, if a file
// cannot be read, is not PEM of the right kind (a certificate for cert and
// ca, a private key for key), or if the key does not belong to the
// certificate.
absl::Status CheckTlsFiles(const TlsFiles& files);

// Credentials from explicit files: insecure ones when `files` is empty, mTLS
// otherwise. Errors as CheckTlsFiles. Each call reads the files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentials(
    const TlsFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsChannelCredentials(
    const TlsFiles& files);

// Reads and checks the files the flags name and caches the result: call it
// once at startup (see Usage above). Errors as CheckTlsFiles.
absl::Status InitTlsFromFlags();

// Credentials for the flags' files (cached; errors as CheckTlsFiles).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFlags();
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags();

// For code that cannot return a status (constructors of RPC clients). Every
// main() has checked the flags with InitTlsFromFlags before it builds such a
// client, so an error here is a programmer error: it LOG(FATAL)s with the
// status.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFromFlagsOrDie();

// True when the flags ask for TLS (any of them set).
bool TlsEnabledFromFlags();

// What every listening role does to its builder before AddListeningPort:
// the port is exclusive (SO_REUSEPORT off, so a second process on a taken
// port fails at start instead of sharing its connections), and, with TLS
// off, an address that is not loopback gets a loud warning without a job
// secret (common/job_secret.h; docs/security.md: then anyone who reaches the
// port is a member) and a line saying the secret crosses in the clear with
// one.
void ConfigureListener(const std::string& listen, const char* role, grpc::ServerBuilder* builder);

// What every client channel of a job (PsClient, the scheduler's calls to
// servers, SchedulerClient) sets on its arguments: a lost peer is retried
// after 100 ms and then at most every second (gRPC's default backoff grows to
// two minutes), so a restarted server or scheduler is reached within a second
// of it listening; and each connection attempt (TCP, the TLS handshake,
// HTTP/2's settings) gets at least 5 s to finish. gRPC's C core takes
// GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as that minimum; at 100 ms a peer whose
// handshake needs more than the 1 s backoff cap (a loaded node, a slow link)
// was never reached, the client retrying for ever (tests/tls_test.cc).
void ConfigureChannel(grpc::ChannelArguments* args);

// Whether the host of `listen` (host:port, or a gRPC peer string such as
// "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000") is a loopback address.
bool IsLoopbackAddress(const std::string& listen);

// Whether the caller of an RPC is an operator (docs/security.md). With TLS:
// any member if `operator_names` is empty, else a peer whose certificate's
// common name is one of them. Without TLS: a caller on this host (loopback).
// PERMISSION_DENIED naming `rpc` and the caller otherwise.
absl::Status CheckOperator(const char* rpc, const grpc::ServerContext& context,
                           const std::vector<std::string>& operator_names);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TLS_H_
