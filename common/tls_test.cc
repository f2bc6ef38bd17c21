// Flag and file checks of common/tls.h on certificates made at test time with
// the openssl command-line tool. The handshakes themselves (mTLS job, wrong CA
// refused) are in tests/tls_test.cc against the real binaries.
#include "common/tls.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

// Runs a shell command; true on exit status 0.
bool Sh(const std::string& command) { return std::system((command + " 2>/dev/null").c_str()) == 0; }

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/tls_unit";
    ASSERT_TRUE(Sh("mkdir -p " + dir_));
    // Two self-signed certificates (each is its own CA), EC keys for speed.
    for (const char* name : {"a", "b"}) {
      ASSERT_TRUE(
          Sh(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                          "-nodes -days 2",
                          " -subj /CN=", name, " -addext subjectAltName=IP:127.0.0.1,DNS:localhost",
                          " -keyout ", dir_, "/", name, ".key -out ", dir_, "/", name, ".crt")))
          << "openssl is required";
    }
    std::ofstream(dir_ + "/text.txt") << "not a certificate\n";
  }

  void TearDown() override {
    absl::SetFlag(&FLAGS_tls_cert, "");
    absl::SetFlag(&FLAGS_tls_key, "");
    absl::SetFlag(&FLAGS_tls_ca, "");
  }

  static std::string P(const std::string& name) { return dir_ + "/" + name; }
  static TlsFiles Good() { return {P("a.crt"), P("a.key"), P("a.crt")}; }

  static std::string dir_;
};

std::string TlsTest::dir_;

TEST_F(TlsTest, NoFilesMeansInsecure) {
  EXPECT_TRUE(CheckTlsFiles({}).ok());
  auto server = TlsServerCredentials({});
  ASSERT_TRUE(server.ok());
  EXPECT_NE(*server, nullptr);
  auto channel = TlsChannelCredentials({});
  ASSERT_TRUE(channel.ok());
  EXPECT_NE(*channel, nullptr);
}

TEST_F(TlsTest, GoodFilesGiveCredentials) {
  EXPECT_TRUE(CheckTlsFiles(Good()).ok()) << CheckTlsFiles(Good());
  auto server = TlsServerCredentials(Good());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE(*server, nullptr);
  auto channel = TlsChannelCredentials(Good());
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(*channel, nullptr);
}

TEST_F(TlsTest, OnlySomeFilesAreRefused) {
  for (const TlsFiles& f : {TlsFiles{P("a.crt"), "", ""}, TlsFiles{"", P("a.key"), ""},
                            TlsFiles{P("a.crt"), P("a.key"), ""}, TlsFiles{"", "", P("a.crt")}}) {
    const absl::Status s = CheckTlsFiles(f);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("needs all of --tls_cert, --tls_key and --tls_ca"));
    EXPECT_TRUE(absl::IsInvalidArgument(TlsServerCredentials(f).status()));
    EXPECT_TRUE(absl::IsInvalidArgument(TlsChannelCredentials(f).status()));
  }
}

TEST_F(TlsTest, MissingFileIsNamed) {
  TlsFiles f = Good();
  f.key = P("no-such.key");
  const absl::Status s = CheckTlsFiles(f);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("--tls_key=" + P("no-such.key") + ": cannot read"));
}

TEST_F(TlsTest, NonPemFilesAreNamed) {
  TlsFiles f = Good();
  f.cert = P("text.txt");
  EXPECT_THAT(CheckTlsFiles(f).message(),
              HasSubstr("--tls_cert=" + P("text.txt") + ": not a PEM certificate"));
  f = Good();
  f.key = P("text.txt");
  EXPECT_THAT(CheckTlsFiles(f).message(),
              HasSubstr("--tls_key=" + P("text.txt") + ": not an unencrypted PEM private key"));
  f = Good();
  f.ca = P("text.txt");
  EXPECT_THAT(CheckTlsFiles(f).message(),
              HasSubstr("--tls_ca=" + P("text.txt") + ": not a PEM certificate"));
  f = Good();
  f.cert = P("a.key");  // A key where a certificate belongs.
  EXPECT_THAT(CheckTlsFiles(f).message(), HasSubstr("not a PEM certificate"));
}

TEST_F(TlsTest, KeyOfAnotherCertificateIsRefused) {
  TlsFiles f = Good();
  f.key = P("b.key");
  const absl::Status s = CheckTlsFiles(f);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("does not belong to the certificate --tls_cert="));
}

TEST_F(TlsTest, FlagsAreCheckedAndCached) {
  EXPECT_TRUE(InitTlsFromFlags().ok());  // No flags: plaintext.
  EXPECT_FALSE(TlsEnabledFromFlags());
  ASSERT_TRUE(ChannelCredentialsFromFlags().ok());

  absl::SetFlag(&FLAGS_tls_cert, P("a.crt"));
  EXPECT_TRUE(TlsEnabledFromFlags());
  EXPECT_THAT(InitTlsFromFlags().message(), HasSubstr("needs all of"));
  EXPECT_TRUE(absl::IsInvalidArgument(ServerCredentialsFromFlags().status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ChannelCredentialsFromFlags().status()));

  absl::SetFlag(&FLAGS_tls_key, P("a.key"));
  absl::SetFlag(&FLAGS_tls_ca, P("a.crt"));
  ASSERT_TRUE(InitTlsFromFlags().ok()) << InitTlsFromFlags();
  auto first = ChannelCredentialsFromFlags();
  auto second = ChannelCredentialsFromFlags();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);  // Loaded once, shared.
  EXPECT_TRUE(ServerCredentialsFromFlags().ok());
  EXPECT_NE(ChannelCredentialsFromFlagsOrDie(), nullptr);

  absl::SetFlag(&FLAGS_tls_ca, P("missing.crt"));
  EXPECT_THAT(InitTlsFromFlags().message(), HasSubstr("--tls_ca=" + P("missing.crt")));
}

// Listen addresses and gRPC peer strings: loopback or not (the plaintext
// warning and, without TLS, who is an operator).
TEST(LoopbackTest, ListenAddressesAndPeers) {
  for (const char* a : {"127.0.0.1:7000", "localhost:0", "[::1]:7000", "ipv4:127.0.0.1:5123",
                        "ipv6:[::1]:5123", "127.1.2.3:80", "ipv6:[::ffff:127.0.0.1]:9"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:7000", "10.0.0.5:7000", "[::]:7000", "ipv4:10.1.2.3:5123",
                        "ipv6:[2001:db8::1]:5123", "example.org:443", "ipv4:128.0.0.1:1",
                        "ipv6:[::ffff:10.0.0.1]:9"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

}  // namespace
}  // namespace shardps
