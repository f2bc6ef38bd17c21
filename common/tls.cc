#include "common/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpc/grpc.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

ABSL_FLAG(std::string, tls_cert, shardps::EnvOr("SHARDPS_TLS_CERT", ""),
          "TLS: this process's certificate (chain), PEM. Set with --tls_key and "
          "--tls_ca for mutual TLS on every gRPC channel; all empty = "
          "plaintext. Env: SHARDPS_TLS_CERT.");
ABSL_FLAG(std::string, tls_key, shardps::EnvOr("SHARDPS_TLS_KEY", ""),
          "TLS: the private key of --tls_cert, PEM (unencrypted). Env: "
          "SHARDPS_TLS_KEY.");
ABSL_FLAG(std::string, tls_ca, shardps::EnvOr("SHARDPS_TLS_CA", ""),
          "TLS: CA certificate(s), PEM; peers must present a certificate "
          "signed by it. Env: SHARDPS_TLS_CA.");

namespace shardps {
namespace {

// The three files' contents, checked.
struct Pem {
  std::string cert, key, ca;
};

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

std::string Where(const char* flag, const std::string& path) {
  return absl::StrCat("--", flag, "=", path);
}

// OpenSSL's first queued error as text; clears this thread's queue.
std::string OpenSslError() {
  const unsigned long e = ERR_peek_error();
  char buf[256] = "no detail";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

// Refuses a passphrase: without this OpenSSL would prompt on the terminal
// for an encrypted key.
int NoPassphrase(char*, int, int, void*) { return -1; }

BioPtr MemBio(const std::string& s) {
  return BioPtr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size())), &BIO_free);
}

absl::StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(flag, path), ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(flag, path), ": read error"));
  }
  return s.str();
}

absl::StatusOr<X509Ptr> ParseCertificate(BIO* bio, const char* flag, const std::string& path) {
  X509Ptr cert(PEM_read_bio_X509(bio, nullptr, &NoPassphrase, nullptr), &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(flag, path), ": not a PEM certificate (", OpenSslError(), ")"));
  }
  return cert;
}

// Parses the three PEM texts and checks the key belongs to the certificate.
absl::Status CheckPem(const TlsFiles& files, const Pem& pem) {
  BioPtr cert_bio = MemBio(pem.cert);
  ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(cert_bio.get(), "tls_cert", files.cert));
  BioPtr key_bio = MemBio(pem.key);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &NoPassphrase, nullptr),
             &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Where("tls_key", files.key),
                                                   ": not an unencrypted PEM private key (",
                                                   OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(Where("tls_key", files.key),
                                                   ": does not belong to the certificate ",
                                                   Where("tls_cert", files.cert)));
  }
  BioPtr ca_bio = MemBio(pem.ca);
  RETURN_IF_ERROR(ParseCertificate(ca_bio.get(), "tls_ca", files.ca).status());
  return absl::OkStatus();
}

absl::StatusOr<Pem> LoadPem(const TlsFiles& files) {
  if (files.cert.empty() || files.key.empty() || files.ca.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS needs all of --tls_cert, --tls_key and --tls_ca or "
                     "none; got --tls_cert=\"",
                     files.cert, "\" --tls_key=\"", files.key, "\" --tls_ca=\"", files.ca, "\""));
  }
  Pem pem;
  ASSIGN_OR_RETURN(pem.cert, ReadFile("tls_cert", files.cert));
  ASSIGN_OR_RETURN(pem.key, ReadFile("tls_key", files.key));
  ASSIGN_OR_RETURN(pem.ca, ReadFile("tls_ca", files.ca));
  RETURN_IF_ERROR(CheckPem(files, pem));
  return pem;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const Pem& pem) {
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pem.ca;
  options.pem_key_cert_pairs.push_back({pem.key, pem.cert});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const Pem& pem) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.ca;
  options.pem_private_key = pem.key;
  options.pem_cert_chain = pem.cert;
  return grpc::SslCredentials(options);
}

// The flags' files, loaded once per distinct flag values.
class FlagCache {
 public:
  static FlagCache& Get() {
    static FlagCache* cache = new FlagCache();
    return *cache;
  }

  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Server() {
    MutexLock lock(&mu_);
    RETURN_IF_ERROR(RefreshLocked());
    if (server_ == nullptr) {
      server_ = pem_ ? MakeServerCredentials(*pem_) : grpc::InsecureServerCredentials();
    }
    return server_;
  }

  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Channel() {
    MutexLock lock(&mu_);
    RETURN_IF_ERROR(RefreshLocked());
    if (channel_ == nullptr) {
      channel_ = pem_ ? MakeChannelCredentials(*pem_) : grpc::InsecureChannelCredentials();
    }
    return channel_;
  }

  absl::Status Init() {
    MutexLock lock(&mu_);
    return RefreshLocked();
  }

 private:
  // (Re)loads when the flag values differ from the cached ones.
  absl::Status RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const TlsFiles files = TlsFilesFromFlags();
    if (loaded_ && files == files_) return status_;
    loaded_ = true;
    files_ = files;
    pem_.reset();
    server_.reset();
    channel_.reset();
    status_ = absl::OkStatus();
    if (files.empty()) return status_;
    absl::StatusOr<Pem> pem = LoadPem(files);
    if (!pem.ok()) {
      status_ = pem.status();
      return status_;
    }
    pem_ = std::make_unique<Pem>(*std::move(pem));
    return status_;
  }

  Mutex mu_;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  TlsFiles files_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Pem> pem_ ABSL_GUARDED_BY(mu_);  // Null: insecure.
  std::shared_ptr<grpc::ServerCredentials> server_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::ChannelCredentials> channel_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

TlsFiles TlsFilesFromFlags() {
  return TlsFiles{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                  absl::GetFlag(FLAGS_tls_ca)};
}

bool TlsEnabledFromFlags() { return !TlsFilesFromFlags().empty(); }

bool IsLoopbackAddress(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (absl::StartsWith(host, "ipv4:")) host = host.substr(5);
  if (absl::StartsWith(host, "ipv6:")) host = host.substr(5);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (absl::StartsWith(host, "::ffff:")) host = host.substr(7);  // IPv4-mapped.
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status CheckOperator(const char* rpc, const grpc::ServerContext& context,
                           const std::vector<std::string>& operator_names) {
  if (!TlsEnabledFromFlags()) {
    if (IsLoopbackAddress(context.peer())) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat(rpc,
                     " refused: without TLS only a caller on the scheduler's host (loopback) is an "
                     "operator; the caller is ",
                     context.peer()));
  }
  if (operator_names.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  if (const auto auth = context.auth_context(); auth != nullptr) {
    for (const grpc::string_ref& cn : auth->FindPropertyValues("x509_common_name")) {
      names.emplace_back(cn.data(), cn.size());
    }
  }
  for (const std::string& name : names) {
    if (std::find(operator_names.begin(), operator_names.end(), name) != operator_names.end()) {
      return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat(rpc, " refused: the caller's certificate (CN ",
                   names.empty() ? std::string("none") : absl::StrJoin(names, ", "),
                   ") is not an operator's (--operator_names)"));
}

void ConfigureListener(const std::string& listen, const char* role, grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (TlsEnabledFromFlags() || IsLoopbackAddress(listen)) return;
  if (JobSecretEnabled()) {
    LOG(INFO) << role << " serves " << listen << " without TLS: calls must carry the job "
              << "secret (--job_secret_file), which crosses the network in the clear "
                 "(docs/security.md)";
  } else {
    LOG(WARNING) << "*** " << role << " serves " << listen
                 << " with neither TLS nor a job secret on a non-loopback address: anyone "
                    "who can reach it can join the job and send data-path requests (pulls, "
                    "pushes). Give every process --job_secret_file, and on a shared network "
                    "--tls_cert, --tls_key and --tls_ca (docs/security.md). ***";
  }
}

void ConfigureChannel(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args->SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args->SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);  // Least time an attempt gets.
}

absl::Status CheckTlsFiles(const TlsFiles& files) {
  if (files.empty()) return absl::OkStatus();
  return LoadPem(files).status();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentials(
    const TlsFiles& files) {
  if (files.empty()) return grpc::InsecureServerCredentials();
  ASSIGN_OR_RETURN(Pem pem, LoadPem(files));
  return MakeServerCredentials(pem);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsChannelCredentials(
    const TlsFiles& files) {
  if (files.empty()) return grpc::InsecureChannelCredentials();
  ASSIGN_OR_RETURN(Pem pem, LoadPem(files));
  return MakeChannelCredentials(pem);
}

absl::Status InitTlsFromFlags() { return FlagCache::Get().Init(); }

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFlags() {
  return FlagCache::Get().Server();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags() {
  return FlagCache::Get().Channel();
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFromFlagsOrDie() {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ChannelCredentialsFromFlags();
  if (!creds.ok()) {
    LOG(FATAL) << creds.status()
               << " (main() should have refused this at startup with "
                  "InitTlsFromFlags)";
  }
  return *std::move(creds);
}

}  // namespace shardps
