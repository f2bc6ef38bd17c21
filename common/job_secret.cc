#include "common/job_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/init.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

ABSL_FLAG(std::string, job_secret_file, shardps::EnvOr("SHARDPS_JOB_SECRET_FILE", ""),
          "A file holding the job's secret (mode 0600, >= 16 bytes): members send "
          "it on every call and the scheduler and servers refuse calls without it "
          "(docs/security.md, \"Membership\").");

namespace shardps {
namespace {

constexpr size_t kMinSecretBytes = 16;

// The flag's secret: read by Refresh (InitJobSecretFromFlags, again when a
// test changed the flag), or on first use.
class SecretCache {
 public:
  absl::Status Refresh() {
    MutexLock lock(&mu_);
    return RefreshLocked();
  }
  // The secret (empty = none; an unreadable file counts as none here: every
  // main has checked it with InitJobSecretFromFlags).
  std::shared_ptr<const std::string> Get() {
    MutexLock lock(&mu_);
    if (!loaded_) (void)RefreshLocked();
    return secret_;
  }

 private:
  absl::Status RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string path = absl::GetFlag(FLAGS_job_secret_file);
    loaded_ = true;
    secret_ = std::make_shared<const std::string>();
    if (path.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> secret = ReadJobSecretFile(path);
    if (!secret.ok()) {
      return absl::Status(secret.status().code(),
                          absl::StrCat("--job_secret_file: ", secret.status().message()));
    }
    secret_ = std::make_shared<const std::string>(*std::move(secret));
    return absl::OkStatus();
  }

  Mutex mu_;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const std::string> secret_ ABSL_GUARDED_BY(mu_);
};

SecretCache& Cache() {
  static SecretCache* cache = new SecretCache;
  return *cache;
}

// Adds the secret to every call's initial metadata.
class SecretInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit SecretInterceptor(const std::string* secret) : secret_(secret) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kJobSecretMetadata, *secret_});
    }
    methods->Proceed();
  }

 private:
  const std::string* const secret_;  // Owned by the factory, which outlives the channel's calls.
};

class SecretInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit SecretInterceptorFactory(std::string secret) : secret_(std::move(secret)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new SecretInterceptor(&secret_);
  }

 private:
  const std::string secret_;
};

}  // namespace

absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, absl::string_view what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " is not a regular file"));
  }
  if ((st.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " is open to others or writable by its group (mode ",
                     absl::StrFormat("%03o", st.st_mode & 0777), "): chmod 600 it"));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " ", path));
  }
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

absl::StatusOr<std::string> ReadJobSecretFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string secret, ReadPrivateFile(path, "job secret file"));
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the job secret file ", path, " holds ",
                                                   secret.size(), " bytes; at least ",
                                                   kMinSecretBytes, " are needed"));
  }
  return secret;
}

absl::Status WriteJobSecretFile(const std::string& path) {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("RAND_bytes failed: no random secret");
  }
  const std::string hex = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the job secret file ", path, ": ", std::strerror(errno)));
  }
  const std::string line = hex + "\n";
  const bool ok = fchmod(fd, 0600) == 0 &&
                  write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int saved = errno;
  close(fd);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the job secret file ", path, ": ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

absl::Status InitJobSecretFromFlags() { return Cache().Refresh(); }

bool JobSecretEnabled() { return !Cache().Get()->empty(); }

absl::Status CheckJobSecret(const char* rpc, const grpc::ServerContext& context) {
  const std::shared_ptr<const std::string> held = Cache().Get();
  const std::string& secret = *held;
  if (secret.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kJobSecretMetadata);
  if (it != metadata.end() && it->second.size() == secret.size() &&
      CRYPTO_memcmp(it->second.data(), secret.data(), secret.size()) == 0) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      absl::StrCat(rpc, " refused: the call does not carry this job's secret"));
}

std::shared_ptr<grpc::Channel> CreateJobChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args) {
  std::string secret = *Cache().Get();
  if (secret.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<SecretInterceptorFactory>(std::move(secret)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(creators));
}

}  // namespace shardps
