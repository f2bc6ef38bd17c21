// Membership: the job secret every member of a job presents on every call.
//
// --job_secret_file (SHARDPS_JOB_SECRET_FILE) names a file holding the job's
// secret: at least 16 bytes once surrounding whitespace is trimmed, in a
// regular file others may neither read nor write and its group may not
// write (a Kubernetes Secret mounted for the pod's fsGroup is group-readable;
// a file open to others is refused, as ssh refuses a private key). The launcher
// writes one per job, deploy/k8s mounts a Secret, deploy/slurm writes one
// into the job's directory (docs/security.md, "Membership").
//
// With a secret, every client channel of the process (CreateJobChannel: the
// PS client, SchedulerClient, the scheduler's calls to servers) sends it as
// metadata `x-shardps-job-secret` on every call, and ps_scheduler and
// ps_server refuse every call of their services (CheckJobSecret; the health
// service stays open for probes) that carries none or another one with
// UNAUTHENTICATED and a message that says only that: a caller that is not a
// member learns nothing of the job (no fingerprint, no job id, no state).
// Without one nothing is checked, and the listeners warn when they serve a
// non-loopback address with neither TLS nor a secret (common/tls.h
// ConfigureListener).
//
// What it protects: over plaintext the secret crosses the network in the
// clear, so it keeps out whoever can reach the job's ports, not whoever can
// read its traffic; with mTLS (common/tls.h) it is encrypted as well.
//
// Usage: each binary calls InitJobSecretFromFlags() next to
// InitTlsFromFlags() and exits with status 2 on an error (a missing, short or
// shared file is a startup error naming it). The value is cached and
// reloaded when the flag changes (only tests do that). Thread-safe.
#ifndef SHARDPS_COMMON_JOB_SECRET_H_
#define SHARDPS_COMMON_JOB_SECRET_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"

ABSL_DECLARE_FLAG(std::string, job_secret_file);

namespace shardps {

// The metadata key members send the secret under.
inline constexpr char kJobSecretMetadata[] = "x-shardps-job-secret";

// The contents of `path`, surrounding whitespace stripped, if it is a
// regular file others may neither read nor write and its group may not
// write (a secret a supervisor wrote, mode 0600 or 0640); otherwise
// INVALID_ARGUMENT naming `what` ("job secret file") and the path.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, absl::string_view what);

// Reads and checks a secret file (see above): INVALID_ARGUMENT naming the
// path if it cannot be read, is not a regular file, is open to others or
// writable by its group, or holds fewer than 16 bytes.
absl::StatusOr<std::string> ReadJobSecretFile(const std::string& path);

// Writes a new random secret (32 bytes, hex) to `path` with mode 0600
// (the launcher's and the test harnesses' way to make one).
absl::Status WriteJobSecretFile(const std::string& path);

// Reads the flag's file, if any (errors as ReadJobSecretFile).
absl::Status InitJobSecretFromFlags();

// Whether the flag names a secret (a file that was read successfully).
bool JobSecretEnabled();

// OK when no secret is set or the call carries it; UNAUTHENTICATED
// otherwise, naming the RPC only.
absl::Status CheckJobSecret(const char* rpc, const grpc::ServerContext& context);

// A channel that sends the secret (if any) on every call.
std::shared_ptr<grpc::Channel> CreateJobChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args);

}  // namespace shardps

#endif  // SHARDPS_COMMON_JOB_SECRET_H_
