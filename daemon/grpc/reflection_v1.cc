#include "daemon/grpc/reflection_v1.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace minfer::daemon {
namespace {

namespace rv1 = grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

void SetError(grpc::StatusCode code, const std::string& message,
              rv1::ServerReflectionResponse* out) {
  out->mutable_error_response()->set_error_code(static_cast<int32_t>(code));
  out->mutable_error_response()->set_error_message(message);
}

// `file` and, depth first, the files it imports, leaving out those in
// *sent (which then lists them all).
void AddFile(const FileDescriptor* file, std::vector<std::string>* sent,
             rv1::FileDescriptorResponse* out) {
  if (std::find(sent->begin(), sent->end(), file->name()) != sent->end()) return;
  sent->push_back(file->name());
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), sent, out);
}

}  // namespace

ReflectionV1Service::ReflectionV1Service(std::vector<std::string> services)
    : services_(std::move(services)) {}

rv1::ServerReflectionResponse ReflectionV1Service::Answer(
    const rv1::ServerReflectionRequest& request) const {
  const DescriptorPool& pool = *DescriptorPool::generated_pool();
  rv1::ServerReflectionResponse out;
  out.set_valid_host(request.host());
  *out.mutable_original_request() = request;
  const FileDescriptor* file = nullptr;
  switch (request.message_request_case()) {
    case rv1::ServerReflectionRequest::kFileByFilename:
      file = pool.FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no file named '", request.file_by_filename(), "'"), &out);
      }
      break;
    case rv1::ServerReflectionRequest::kFileContainingSymbol:
      file = pool.FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no symbol named '", request.file_containing_symbol(), "'"), &out);
      }
      break;
    case rv1::ServerReflectionRequest::kFileContainingExtension: {
      const rv1::ExtensionRequest& ext = request.file_containing_extension();
      const google::protobuf::Descriptor* type = pool.FindMessageTypeByName(ext.containing_type());
      const google::protobuf::FieldDescriptor* field =
          type == nullptr ? nullptr : pool.FindExtensionByNumber(type, ext.extension_number());
      if (field == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no extension ", ext.extension_number(), " of '",
                              ext.containing_type(), "'"),
                 &out);
      } else {
        file = field->file();
      }
      break;
    }
    case rv1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const google::protobuf::Descriptor* type =
          pool.FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no message type named '", request.all_extension_numbers_of_type(),
                              "'"),
                 &out);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool.FindAllExtensions(type, &extensions);
      rv1::ExtensionNumberResponse* numbers = out.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* e : extensions) numbers->add_extension_number(e->number());
      break;
    }
    case rv1::ServerReflectionRequest::kListServices:
      for (const std::string& s : services_) {
        out.mutable_list_services_response()->add_service()->set_name(s);
      }
      break;
    case rv1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::INVALID_ARGUMENT,
               "message_request: set one of file_by_filename, file_containing_symbol, "
               "file_containing_extension, all_extension_numbers_of_type or list_services",
               &out);
      break;
  }
  std::vector<std::string> sent;
  if (file != nullptr) AddFile(file, &sent, out.mutable_file_descriptor_response());
  return out;
}

grpc::Status ReflectionV1Service::ServerReflectionInfo(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<rv1::ServerReflectionResponse, rv1::ServerReflectionRequest>*
        stream) {
  rv1::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    if (!stream->Write(Answer(request))) break;
  }
  return grpc::Status::OK;
}

}  // namespace minfer::daemon
