#include "client/info.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/hosted_model.h"
#include "client/rpc_status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace attnserve::client {

std::string FormatServerInfo(const v1::ServerInfo& info) {
  // Through reflection, so that fields added to ServerInfo show up unasked.
  const google::protobuf::Descriptor* descriptor = info.GetDescriptor();
  const google::protobuf::Reflection* reflection = info.GetReflection();
  std::string text;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) continue;
    std::string value;
    if (field->cpp_type() ==
        google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
      value = reflection->GetString(info, field);
    } else {
      google::protobuf::TextFormat::PrintFieldValueToString(info, field, -1,
                                                            &value);
    }
    absl::StrAppend(&text, field->name(), ": ", value, "\n");
  }
  absl::StrAppend(&text, "models: ", info.models_size(), "\n");
  for (const v1::ModelInfo& model : info.models()) {
    absl::StrAppend(&text, "  ", model.name(), ": ", ModelShapeText(model),
                    "\n    config: ", model.config_json(), "\n");
  }
  return text;
}

ExitCode RunInfo(const ConnectionOptions& connection, std::ostream& out,
                 std::ostream& err) {
  return AskEveryTarget(connection, err, [&](const TargetCall& call) {
    if (call.several) {
      out << (call.index > 0 ? "\n" : "") << "target: " << call.name << "\n";
    }
    auto stub = v1::AttentionService::NewStub(call.channel);
    v1::ServerInfo info;
    const grpc::Status status =
        stub->GetServerInfo(call.context, v1::GetServerInfoRequest(), &info);
    if (!status.ok()) {
      err << call.prefix() << RpcErrorLine(status) << "\n";
      return kExitRpcFailed;
    }
    out << FormatServerInfo(info);
    return kExitOk;
  });
}

}  // namespace attnserve::client
