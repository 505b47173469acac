#include "model/safetensors.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/model_test_util.h"
#include "tests/util/test_util.h"

namespace attnserve::model {
namespace {

using ::attnserve::testing::RawSafetensors;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::TensorSet;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

absl::Status ParseError(const std::string& bytes) {
  return SafetensorsFile::Parse(bytes, "w.safetensors").status();
}

// A file with one tensor entry `entry` (the JSON object's text) and `data`.
std::string OneTensor(absl::string_view entry, absl::string_view data) {
  return RawSafetensors(absl::StrCat(R"({"t":)", entry, "}"), data);
}

uint64_t HeaderSize(const std::string& file) {
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) {
    size = (size << 8) | static_cast<unsigned char>(file[i]);
  }
  return size;
}

TEST(SafetensorsTest, SerializeAndParseRoundTrip) {
  TensorSet set;
  set.Add("a.weight", SafetensorsDType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  set.Add("b", SafetensorsDType::kF16, {3}, {0.5f, -1.0f, 2.0f});
  set.Add("c", SafetensorsDType::kBF16, {1, 1, 2}, {1.5f, -3.0f});
  const std::string bytes = set.Serialize();
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Parse(bytes, "w.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors().size(), 3u);
  for (const auto& [name, tensor] : set.tensors()) {
    const auto it = file->tensors().find(name);
    ASSERT_NE(it, file->tensors().end()) << name;
    EXPECT_EQ(it->second.dtype, tensor.dtype) << name;
    EXPECT_EQ(it->second.shape, tensor.shape) << name;
    EXPECT_EQ(it->second.data, tensor.data) << name;
  }
  EXPECT_TRUE(file->metadata().empty());
}

TEST(SafetensorsTest, HeaderIsPaddedWithSpacesToAMultipleOf8) {
  for (int n = 1; n <= 8; ++n) {
    TensorSet set;
    set.Add(std::string(n, 'x'), SafetensorsDType::kF32, {1}, {1.0f});
    const std::string bytes = set.Serialize();
    const uint64_t header_size = HeaderSize(bytes);
    EXPECT_EQ(header_size % 8, 0u) << n;
    const std::string header = bytes.substr(8, header_size);
    EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}')) << header;
    EXPECT_EQ(bytes.size(), 8 + header_size + 4);
    EXPECT_TRUE(SafetensorsFile::Parse(bytes, "w").ok()) << n;
  }
}

TEST(SafetensorsTest, SerializedHeaderText) {
  TensorSet set;
  set.Add("w", SafetensorsDType::kBF16, {2}, {1.0f, 2.0f});
  const std::string bytes = set.Serialize();
  EXPECT_EQ(bytes.substr(8, HeaderSize(bytes)),
            R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}} )");
}

TEST(SafetensorsTest, EmptyFileHasNoTensors) {
  const std::string bytes = SerializeSafetensors({});
  EXPECT_EQ(bytes.size(), 16u);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(bytes, "w");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().empty());
}

TEST(SafetensorsTest, ScalarsAndEmptyTensors) {
  TensorSet set;
  set.Add("scalar", SafetensorsDType::kF32, {}, {7.0f});
  set.Add("empty", SafetensorsDType::kF16, {0, 4}, {});
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Parse(set.Serialize(), "w");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().at("scalar").shape.empty());
  EXPECT_EQ(file->tensors().at("scalar").data.size(), 4u);
  EXPECT_THAT(file->tensors().at("empty").shape, ElementsAre(0, 4));
  EXPECT_TRUE(file->tensors().at("empty").data.empty());
}

TEST(SafetensorsTest, MetadataIsKept) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(
      RawSafetensors(R"({"__metadata__": {"format": "pt", "x": "y"},)"
                     R"( "t": {"dtype": "F32", "shape": [1],)"
                     R"( "data_offsets": [0, 4]}})",
                     std::string(4, '\0')),
      "w");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("x"), "y");
  EXPECT_EQ(file->tensors().size(), 1u);
}

TEST(SafetensorsTest, ViewsSurviveMoves) {
  TensorSet set;
  set.Add("t", SafetensorsDType::kF32, {2}, {3.0f, 4.0f});
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Parse(set.Serialize(), "w");
  ASSERT_TRUE(file.ok()) << file.status();
  SafetensorsFile moved = *std::move(file);
  SafetensorsFile again = std::move(moved);
  EXPECT_EQ(again.tensors().at("t").data, set.tensors().at("t").data);
}

TEST(SafetensorsTest, ReadsAFile) {
  TempDir dir;
  TensorSet set;
  set.Add("t", SafetensorsDType::kF32, {2}, {3.0f, 4.0f});
  dir.Write("w.safetensors", set.Serialize());
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Read(dir.Path("w.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors().at("t").data, set.tensors().at("t").data);
}

TEST(SafetensorsTest, ReadErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.Path("missing.safetensors");
  EXPECT_THAT(SafetensorsFile::Read(missing).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(StartsWith(missing + ": cannot open"),
                             HasSubstr("No such file"))));
  dir.MakeDir("folder");
  EXPECT_THAT(SafetensorsFile::Read(dir.Path("folder")).status(),
              StatusIs(kInvalid, HasSubstr("folder: not a regular file")));
  dir.Write("short.safetensors", "abc");
  EXPECT_THAT(SafetensorsFile::Read(dir.Path("short.safetensors")).status(),
              StatusIs(kInvalid, StartsWith(dir.Path("short.safetensors") +
                                            ": file is 3 bytes")));
}

TEST(SafetensorsTest, ShorterThanTheHeaderSize) {
  EXPECT_THAT(ParseError("1234567"),
              StatusIs(kInvalid,
                       HasSubstr("w.safetensors: file is 7 bytes, shorter than "
                                 "the 8-byte header size")));
  EXPECT_THAT(ParseError(""), StatusIs(kInvalid, HasSubstr("file is 0 bytes")));
}

TEST(SafetensorsTest, HeaderSizeBeyondTheFile) {
  TensorSet set;
  set.Add("t", SafetensorsDType::kF32, {4}, {1, 2, 3, 4});
  const std::string bytes = set.Serialize();
  const uint64_t header_size = HeaderSize(bytes);
  // Truncated inside the header.
  EXPECT_THAT(ParseError(bytes.substr(0, 8 + header_size - 1)),
              StatusIs(kInvalid, HasSubstr(absl::StrCat(
                                     "header size ", header_size,
                                     " is beyond the file (", header_size - 1,
                                     " bytes follow the size; truncated?)"))));
  EXPECT_THAT(ParseError(bytes.substr(0, 8)),
              StatusIs(kInvalid, HasSubstr("is beyond the file (0 bytes")));
}

TEST(SafetensorsTest, HeaderSizeAboveTheLimit) {
  std::string bytes = RawSafetensors("{}", "");
  bytes[0] = bytes[1] = bytes[2] = bytes[3] = '\xff';  // 4294967295
  EXPECT_THAT(
      ParseError(bytes),
      StatusIs(kInvalid, HasSubstr("header size 4294967295 is above the limit "
                                   "of 100000000 bytes")));
  bytes.replace(0, 8, std::string(8, '\xff'));
  EXPECT_THAT(ParseError(bytes),
              StatusIs(kInvalid, HasSubstr("header size 18446744073709551615 "
                                           "is above the limit")));
}

TEST(SafetensorsTest, TruncatedData) {
  TensorSet set;
  set.Add("a", SafetensorsDType::kF32, {4}, {1, 2, 3, 4});
  set.Add("b", SafetensorsDType::kF32, {2}, {5, 6});
  const std::string bytes = set.Serialize();
  EXPECT_THAT(ParseError(bytes.substr(0, bytes.size() - 1)),
              StatusIs(kInvalid,
                       HasSubstr("w.safetensors: tensor b: data_offsets [16, "
                                 "24]: end is beyond the data (23 bytes after "
                                 "the header)")));
}

TEST(SafetensorsTest, HeaderNotJson) {
  EXPECT_THAT(
      ParseError(RawSafetensors("{\"t\": ", "")),
      StatusIs(kInvalid, HasSubstr("w.safetensors: header: malformed JSON")));
  EXPECT_THAT(ParseError(RawSafetensors("", "")),
              StatusIs(kInvalid, HasSubstr("header: malformed JSON")));
  // NUL padding is not the format's (spaces are).
  EXPECT_THAT(ParseError(RawSafetensors(std::string("{}\0\0", 4), "")),
              StatusIs(kInvalid, HasSubstr("header: malformed JSON: NUL byte "
                                           "at offset 2")));
}

TEST(SafetensorsTest, HeaderNotAnObject) {
  EXPECT_THAT(ParseError(RawSafetensors("[1, 2]", "")),
              StatusIs(kInvalid, HasSubstr("w.safetensors: header is not a "
                                           "JSON object (got an array)")));
  EXPECT_THAT(ParseError(RawSafetensors("42", "")),
              StatusIs(kInvalid, HasSubstr("(got a number (42))")));
}

TEST(SafetensorsTest, DuplicateTensorName) {
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
          R"( "t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
          std::string(8, '\0'))),
      StatusIs(kInvalid, HasSubstr("header: duplicate key \"t\"")));
}

TEST(SafetensorsTest, BadMetadata) {
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__": [1]})", "")),
              StatusIs(kInvalid, HasSubstr("__metadata__: expected an object, "
                                           "got an array")));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"__metadata__": {"epochs": 3}})", "")),
      StatusIs(kInvalid, HasSubstr("__metadata__ key \"epochs\": expected a "
                                   "string, got a number (3)")));
}

TEST(SafetensorsTest, EntryNotAnObject) {
  EXPECT_THAT(ParseError(OneTensor("[0, 4]", "")),
              StatusIs(kInvalid, HasSubstr("w.safetensors: tensor t: expected "
                                           "an object, got an array")));
}

TEST(SafetensorsTest, EntryMissingAKey) {
  EXPECT_THAT(ParseError(OneTensor(R"({"shape": [1], "data_offsets": [0, 4]})",
                                   std::string(4, '\0'))),
              StatusIs(kInvalid, HasSubstr("tensor t: missing \"dtype\"")));
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "F32", "data_offsets": [0, 4]})",
                           std::string(4, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: missing \"shape\"")));
  EXPECT_THAT(
      ParseError(
          OneTensor(R"({"dtype": "F32", "shape": [1]})", std::string(4, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: missing \"data_offsets\"")));
}

TEST(SafetensorsTest, EntryWithAnUnknownKey) {
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "F32", "shape": [1],)"
                           R"( "data_offsets": [0, 4], "stride": [1]})",
                           std::string(4, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: unknown key \"stride\" "
                                   "(expected dtype, shape, data_offsets)")));
}

TEST(SafetensorsTest, UnsupportedDTypesAreNamed) {
  for (const char* dtype : {"F64", "I32", "I64", "U8", "BOOL", "F8_E4M3",
                            "F8_E5M2", "I8", "I16", "U16"}) {
    EXPECT_THAT(
        ParseError(OneTensor(absl::StrCat(R"({"dtype": ")", dtype,
                                          R"(", "shape": [0],)"
                                          R"( "data_offsets": [0, 0]})"),
                             "")),
        StatusIs(kInvalid, HasSubstr(absl::StrCat(
                               "w.safetensors: tensor t: dtype ", dtype,
                               " is not supported (expected F32, "
                               "F16 or BF16)"))));
  }
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "float32", "shape": [1], "data_offsets": [0, 4]})",
          std::string(4, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: unknown dtype "
                                   "\"float32\" (expected F32, F16 "
                                   "or BF16)")));
  EXPECT_THAT(ParseError(OneTensor(
                  R"({"dtype": 32, "shape": [1], "data_offsets": [0, 4]})",
                  std::string(4, '\0'))),
              StatusIs(kInvalid, HasSubstr("tensor t: \"dtype\": expected a "
                                           "string, got a number (32)")));
}

TEST(SafetensorsTest, BadShapes) {
  EXPECT_THAT(ParseError(OneTensor(
                  R"({"dtype": "F32", "shape": 4, "data_offsets": [0, 16]})",
                  std::string(16, '\0'))),
              StatusIs(kInvalid, HasSubstr("tensor t: \"shape\": expected an "
                                           "array of integers, got a number "
                                           "(4)")));
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [2, 2.0], "data_offsets": [0, 16]})",
          std::string(16, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: \"shape\"[1]: expected "
                                   "an integer, got a number (2.0)")));
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]})",
          std::string(16, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: \"shape\"[0] is -2, a "
                                   "negative dimension")));
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "F32", "shape": [9223372036854775808],)"
                           R"( "data_offsets": [0, 0]})",
                           "")),
      StatusIs(kInvalid, HasSubstr("tensor t: \"shape\"[0] is "
                                   "9223372036854775808, too large")));
}

// Shapes whose element or byte count wraps around 2^64 must not pass for the
// few bytes they come with.
TEST(SafetensorsTest, HostileShapesDoNotOverflow) {
  // 2^32 · 2^32 = 2^64 ≡ 0.
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "F32", "shape": [4294967296, )"
                           R"(4294967296], "data_offsets": [0, 0]})",
                           "")),
      StatusIs(kInvalid, HasSubstr("tensor t: shape [4294967296, 4294967296] "
                                   "has too many elements")));
  // 2^62 elements × 4 bytes = 2^64 ≡ 0.
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "F32", "shape": [4611686018427387904],)"
                           R"( "data_offsets": [0, 0]})",
                           "")),
      StatusIs(kInvalid, HasSubstr("has too many elements")));
  // 2^63 + 1 elements × 2 bytes ≡ 2 bytes.
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "BF16", "shape": [3, )"
                           R"(3074457345618258603], "data_offsets": [0, 2]})",
                           std::string(2, '\0'))),
      StatusIs(kInvalid, HasSubstr("has too many elements")));
  // A zero dimension makes the tensor empty whatever the others.
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(
      OneTensor(R"({"dtype": "F32", "shape": [4294967296, 4294967296, 0],)"
                R"( "data_offsets": [0, 0]})",
                ""),
      "w");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().at("t").data.empty());
}

TEST(SafetensorsTest, BadDataOffsets) {
  const std::string data(16, '\0');
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})", data)),
      StatusIs(kInvalid, HasSubstr("tensor t: \"data_offsets\": expected an "
                                   "array of 2 integers, got an array")));
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [1], "data_offsets": "0-4"})", data)),
      StatusIs(kInvalid, HasSubstr("\"data_offsets\": expected an array of 2 "
                                   "integers, got a string")));
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})", data)),
      StatusIs(kInvalid, HasSubstr("tensor t: data_offsets [-4,0] has a "
                                   "negative offset")));
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})", data)),
      StatusIs(kInvalid,
               HasSubstr("tensor t: data_offsets [8, 4]: begin is after end")));
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [5], "data_offsets": [0, 20]})", data)),
      StatusIs(kInvalid, HasSubstr("tensor t: data_offsets [0, 20]: end is "
                                   "beyond the data (16 bytes after the "
                                   "header)")));
  EXPECT_THAT(
      ParseError(OneTensor(R"({"dtype": "F32", "shape": [1],)"
                           R"( "data_offsets": [0, 18446744073709551615]})",
                           data)),
      StatusIs(kInvalid, HasSubstr("end is beyond the data")));
}

TEST(SafetensorsTest, ByteCountMustMatchTheShape) {
  EXPECT_THAT(
      ParseError(OneTensor(
          R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]})",
          std::string(24, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensor t: shape [2, 3] F32 needs 24 "
                                   "bytes, data_offsets [0, 16] hold 16")));
  EXPECT_THAT(ParseError(OneTensor(
                  R"({"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]})",
                  std::string(16, '\0'))),
              StatusIs(kInvalid, HasSubstr("shape [4] BF16 needs 8 bytes")));
  // The serializer writes what it is given, so a test can make this file too.
  TensorSet set;
  set.AddRaw("u", SafetensorsDType::kF16, {3}, std::string(4, '\0'));
  EXPECT_THAT(ParseError(set.Serialize()),
              StatusIs(kInvalid, HasSubstr("tensor u: shape [3] F16 needs 6 "
                                           "bytes, data_offsets [0, 4] hold "
                                           "4")));
}

TEST(SafetensorsTest, OverlappingTensors) {
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
          std::string(16, '\0'))),
      StatusIs(kInvalid, HasSubstr("w.safetensors: tensors a and b overlap "
                                   "(data_offsets [0, 16] and [8, 16])")));
  // Found after a tensor that ends earlier, too.
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},)"
          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},)"
          R"( "c": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
          std::string(32, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensors a and b overlap")));
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},)"
          R"( "c": {"dtype": "F32", "shape": [1], "data_offsets": [28, 32]}})",
          std::string(32, '\0'))),
      StatusIs(kInvalid, HasSubstr("tensors a and c overlap")));
  // Empty tensors share no bytes; gaps between tensors are allowed.
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(
      RawSafetensors(
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
          R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},)"
          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
          std::string(16, '\0')),
      "w");
  EXPECT_TRUE(file.ok()) << file.status();
}

TEST(SafetensorsTest, DTypeNames) {
  EXPECT_EQ(SafetensorsDTypeName(SafetensorsDType::kF32), "F32");
  EXPECT_EQ(SafetensorsDTypeName(SafetensorsDType::kF16), "F16");
  EXPECT_EQ(SafetensorsDTypeName(SafetensorsDType::kBF16), "BF16");
}

}  // namespace
}  // namespace attnserve::model
