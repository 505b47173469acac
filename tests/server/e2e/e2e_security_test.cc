// Who may call a real attnserve: TLS and mutual TLS with certificates made by
// the openssl CLI, and a bearer token that guards the API but not health.

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/e2e_ops_util.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace attnserve::testing {
namespace {

using ::testing::HasSubstr;

// A CA, a server certificate for 127.0.0.1 and localhost, a client certificate
// it signed and a self-signed ("rogue") one, made with the openssl CLI once for
// the suite.
class E2eTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    setup_error_ = new std::string(MakeCertificates());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete setup_error_;
  }
  void SetUp() override { ASSERT_EQ(*setup_error_, ""); }

  // Trusting the CA; presenting `client`.pem when `client` is not empty.
  static std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(
      const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = dir_->Read("ca.pem");
    if (!client.empty()) {
      ssl.pem_private_key = dir_->Read(client + ".key");
      ssl.pem_cert_chain = dir_->Read(client + ".pem");
    }
    return grpc::SslCredentials(ssl);
  }

  static TempDir* dir_;
  static std::string* setup_error_;

 private:
  // "" on success, else what failed and openssl's output.
  static std::string MakeCertificates() {
    if (!dir_->ok()) return "cannot create a temporary directory";
    if (std::system("openssl version >/dev/null 2>&1") != 0) {
      return "the openssl command-line tool is missing; "
             "scripts/install-deps.sh installs it";
    }
    dir_->Write("openssl.cnf", R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
)");
    const std::string cnf = dir_->Path("openssl.cnf");
    const std::string new_key =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto path = [](const char* name) { return dir_->Path(name); };
    const std::vector<std::string> commands = {
        absl::StrCat("openssl req -x509 -config ", cnf, " -extensions ca ",
                     new_key, " -keyout ", path("ca.key"), " -out ",
                     path("ca.pem"), " -days 2 -subj '/CN=attnserve test CA'"),
        absl::StrCat("openssl req -new -config ", cnf, " ", new_key,
                     " -keyout ", path("server.key"), " -out ",
                     path("server.csr"), " -subj '/CN=localhost'"),
        absl::StrCat("openssl x509 -req -in ", path("server.csr"), " -CA ",
                     path("ca.pem"), " -CAkey ", path("ca.key"),
                     " -set_serial 2 -days 2 -extfile ", cnf,
                     " -extensions server -out ", path("server.pem")),
        absl::StrCat("openssl req -new -config ", cnf, " ", new_key,
                     " -keyout ", path("client.key"), " -out ",
                     path("client.csr"), " -subj '/CN=attnserve test client'"),
        absl::StrCat("openssl x509 -req -in ", path("client.csr"), " -CA ",
                     path("ca.pem"), " -CAkey ", path("ca.key"),
                     " -set_serial 3 -days 2 -extfile ", cnf,
                     " -extensions client -out ", path("client.pem")),
        absl::StrCat("openssl req -x509 -config ", cnf, " -extensions client ",
                     new_key, " -keyout ", path("rogue.key"), " -out ",
                     path("rogue.pem"), " -days 2 -subj '/CN=attnserve rogue'"),
    };
    const std::string log = path("openssl.log");
    for (const std::string& command : commands) {
      if (std::system(absl::StrCat(command, " >>", log, " 2>&1").c_str()) !=
          0) {
        return absl::StrCat("`", command, "` failed:\n",
                            dir_->Read("openssl.log"));
      }
    }
    return "";
  }
};

TempDir* E2eTlsTest::dir_ = nullptr;
std::string* E2eTlsTest::setup_error_ = nullptr;

TEST_F(E2eTlsTest, TlsServerAcceptsOnlyTlsClients) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                                      "--tls_cert=" + dir_->Path("server.pem"),
                                      "--tls_key=" + dir_->Path("server.key")});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("tls=on"));
  // TCP step channels are not encrypted: the default listens nowhere.
  EXPECT_THAT((*server)->Log(),
              ::testing::Not(HasSubstr("step_channel_port=")));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials(""))), GrpcOk());
  EXPECT_THAT(SmallAttend((*server)->Channel()),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
}

TEST_F(E2eTlsTest, MutualTlsRequiresASignedClientCertificate) {
  auto server =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            "--tls_cert=" + dir_->Path("server.pem"),
                            "--tls_key=" + dir_->Path("server.key"),
                            "--tls_client_ca=" + dir_->Path("ca.pem")});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("tls=mtls"));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials(""))),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials("rogue"))),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
  EXPECT_THAT(SmallAttend((*server)->Channel()),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials("client"))),
              GrpcOk());
}

TEST(E2eAuthTest, BearerTokenGuardsTheApiButNotHealth) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  dir.Write("token", "s3cret\n");
  auto server =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            "--auth_token_file=" + dir.Path("token")});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();

  EXPECT_THAT(SmallAttend(channel),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                           HasSubstr("authorization")));
  EXPECT_THAT(SmallAttend(channel, "Bearer wrong"),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                           HasSubstr("invalid bearer token")));
  EXPECT_THAT(SmallAttend(channel, "s3cret"),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                           HasSubstr("invalid bearer token")));
  EXPECT_THAT(SmallAttend(channel, "Bearer s3cret"), GrpcOk());
  {
    auto stub = v1::AttentionService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(In(kPatience));
    v1::ServerInfo info;
    EXPECT_THAT(
        stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
        GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                     HasSubstr("authorization")));
  }
  ExpectServing(channel, "");
  ExpectServing(channel, "attnserve.v1.AttentionService");
}

}  // namespace
}  // namespace attnserve::testing
