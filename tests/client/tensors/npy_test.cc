#include "client/tensors/npy.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::HasSubstr;

// A file as numpy writes it: magic, version, little-endian header length
// (2 bytes in 1.0, 4 in 2.0 and 3.0), header, data. The header is taken as is
// (no padding is added) so that tests control every byte.
std::string NpyBytes(int major, const std::string& header,
                     const std::string& data) {
  std::string bytes("\x93NUMPY", 6);
  bytes.push_back(static_cast<char>(major));
  bytes.push_back(0);
  const int length_size = major == 1 ? 2 : 4;
  for (int i = 0; i < length_size; ++i) {
    bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return bytes + header + data;
}

std::string Floats(std::vector<float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

// Deterministic bytes for `n` elements of `dtype` (bool: 0 or 1).
std::string SampleData(NpyDType dtype, int64_t n) {
  std::string data(static_cast<size_t>(n) * NpyDTypeSize(dtype), '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = dtype == NpyDType::kBool ? static_cast<char>(i % 3 == 0)
                                       : static_cast<char>(i * 37 + 11);
  }
  return data;
}

class NpyRoundTripTest
    : public ::testing::TestWithParam<std::tuple<NpyDType, int>> {};

TEST_P(NpyRoundTripTest, WritesAndReadsBackTheSameArray) {
  const auto [dtype, version] = GetParam();
  const std::vector<std::vector<int64_t>> shapes = {
      {}, {5}, {2, 3}, {2, 1, 3}, {2, 3, 4, 5}, {1, 2, 0, 3}};
  for (const std::vector<int64_t>& shape : shapes) {
    SCOPED_TRACE(absl::StrCat("rank ", shape.size(), ", version ", version));
    NpyArray array;
    array.dtype = dtype;
    array.shape = shape;
    array.data = SampleData(dtype, array.num_elements());

    absl::StatusOr<std::string> bytes = SerializeNpy(array, version);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // The data starts at a multiple of 64 bytes, after a newline.
    const size_t data_start = bytes->size() - array.data.size();
    EXPECT_EQ(data_start % 64, 0u);
    EXPECT_EQ((*bytes)[data_start - 1], '\n');
    EXPECT_EQ((*bytes)[6], static_cast<char>(version));

    NpyReadOptions options;
    options.u2_as_bfloat16 = true;
    absl::StatusOr<NpyArray> read = ParseNpy(*bytes, options);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->dtype, dtype);
    EXPECT_EQ(read->shape, shape);
    EXPECT_EQ(read->data, array.data);
  }
}

std::string RoundTripName(
    const ::testing::TestParamInfo<std::tuple<NpyDType, int>>& info) {
  static constexpr const char* kNames[] = {"F4", "F2", "Bf16", "U1", "B1"};
  return absl::StrCat(kNames[static_cast<int>(std::get<0>(info.param))], "V",
                      std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypes, NpyRoundTripTest,
    ::testing::Combine(::testing::Values(NpyDType::kFloat32, NpyDType::kFloat16,
                                         NpyDType::kBFloat16, NpyDType::kUInt8,
                                         NpyDType::kBool),
                       ::testing::Values(1, 2, 3)),
    RoundTripName);

TEST(NpyTest, WritesExactlyWhatNumpySaveWrites) {
  // np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)) with numpy 1.x.
  const std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
      std::string(58, ' ') + "\n";
  ASSERT_EQ(10 + header.size(), 128u);
  const std::string data = Floats({0, 1, 2, 3, 4, 5});
  NpyArray array{NpyDType::kFloat32, {2, 3}, data};
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, NpyBytes(1, header, data));
}

TEST(NpyTest, WritesBFloat16AsU2) {
  NpyArray array{NpyDType::kBFloat16, {2}, std::string("\x80\x3f\x00\x40", 4)};
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(*bytes, HasSubstr("'descr': '<u2'"));
  EXPECT_THAT(*bytes, HasSubstr("'shape': (2,)"));
}

TEST(NpyTest, ReadsHeadersAsNumpyWritesThem) {
  // A scalar: np.save(f, np.float32(1.5)).
  absl::StatusOr<NpyArray> scalar = ParseNpy(NpyBytes(
      1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }      \n",
      Floats({1.5f})));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->num_elements(), 1);
  EXPECT_EQ(scalar->data, Floats({1.5f}));

  // A bool vector with numpy 2's extra growth padding and a 16-byte aligned
  // header (numpy < 1.14).
  absl::StatusOr<NpyArray> mask = ParseNpy(
      NpyBytes(1,
               "{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }" +
                   std::string(40, ' ') + "\n",
               std::string("\x01\x00\x01\x01\x00", 5)));
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->dtype, NpyDType::kBool);
  EXPECT_EQ(mask->shape, std::vector<int64_t>{5});

  // Format 2.0 (4-byte header length), f16, keys in another order, double
  // quotes, no trailing comma.
  absl::StatusOr<NpyArray> v2 = ParseNpy(NpyBytes(
      2, "{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<f2\"}\n",
      std::string("\x00\x3c\x00\xc0", 4)));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->dtype, NpyDType::kFloat16);
  EXPECT_EQ(v2->shape, (std::vector<int64_t>{1, 2}));

  // Format 3.0 (utf-8 header), uint8.
  absl::StatusOr<NpyArray> v3 = ParseNpy(NpyBytes(
      3, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 1), }\n",
      std::string("\x07\x00\xff", 3)));
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->dtype, NpyDType::kUInt8);
  EXPECT_EQ(v3->data, std::string("\x07\x00\xff", 3));
}

TEST(NpyTest, ReadsU2OnlyAsBFloat16WhenAsked) {
  const std::string bytes =
      NpyBytes(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }\n",
               std::string("\x80\x3f", 2));
  EXPECT_THAT(ParseNpy(bytes).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'<u2' (uint16) is read only as the raw bits "
                                 "of bfloat16")));
  NpyReadOptions options;
  options.u2_as_bfloat16 = true;
  absl::StatusOr<NpyArray> array = ParseNpy(bytes, options);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, NpyDType::kBFloat16);
}

std::string Header(const std::string& descr, const std::string& order,
                   const std::string& shape) {
  return absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", order,
                      ", 'shape': ", shape, ", }\n");
}

absl::Status ParseError(const std::string& bytes) {
  return ParseNpy(bytes).status();
}

TEST(NpyTest, RejectsBadMagic) {
  EXPECT_THAT(ParseError("PK\x03\x04 this is a zip file"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a .npy file")));
  EXPECT_THAT(ParseError(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("not a .npy file")));
}

TEST(NpyTest, RejectsTruncatedHeaders) {
  EXPECT_THAT(ParseError(std::string("\x93NUMPY\x01", 7)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("truncated header")));
  EXPECT_THAT(ParseError(std::string("\x93NUMPY\x02\x00\x10\x00", 10)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ends inside the header length field")));
  const std::string full =
      NpyBytes(1, Header("<f4", "False", "(2,)"), Floats({1, 2}));
  EXPECT_THAT(ParseError(full.substr(0, 30)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("truncated header: the header length field "
                                 "says")));
}

TEST(NpyTest, RejectsAHeaderLengthBeyondTheFile) {
  // Format 2.0 with a length of 0xffffffff: no arithmetic may wrap.
  std::string bytes("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14);
  EXPECT_THAT(ParseError(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("says 4294967295 bytes but only 2 follow")));
}

TEST(NpyTest, RejectsUnknownVersions) {
  const std::vector<std::pair<int, int>> versions = {{4, 0}, {0, 0}, {1, 1}};
  for (const auto& [major, minor] : versions) {
    std::string bytes = NpyBytes(1, Header("<f4", "False", "()"), Floats({1}));
    bytes[6] = static_cast<char>(major);
    bytes[7] = static_cast<char>(minor);
    EXPECT_THAT(ParseError(bytes),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("unsupported .npy format "
                                                "version ",
                                                major, ".", minor))));
  }
}

TEST(NpyTest, RejectsBigEndianAndOtherDTypes) {
  EXPECT_THAT(
      ParseError(NpyBytes(1, Header(">f4", "False", "(1,)"), Floats({1}))),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("'>f4' is big-endian")));
  EXPECT_THAT(ParseError(NpyBytes(1, Header("<f8", "False", "(1,)"),
                                  std::string(8, '\0'))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unsupported dtype '<f8'")));
  EXPECT_THAT(
      ParseError(NpyBytes(
          1,
          "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), "
          "}\n",
          Floats({1}))),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("structured dtypes are not supported")));
}

TEST(NpyTest, RejectsFortranOrder) {
  EXPECT_THAT(ParseError(NpyBytes(1, Header("<f4", "True", "(2, 2)"),
                                  Floats({1, 2, 3, 4}))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("fortran_order is True")));
}

TEST(NpyTest, RejectsBadShapeText) {
  const std::pair<std::string, std::string> cases[] = {
      {"(2, -1)", "negative dimension"},
      {"(a,)", "expected a non-negative integer"},
      {"(5)", "(5) is not a tuple; a one-dimensional shape is written (5,)"},
      {"[2, 3]", "expected a tuple"},
      {"(2 3)", "expected ',' or ')'"},
      {"(2,,3)", "expected a non-negative integer"},
      {"(99999999999999999999,)", "dimension out of range"},
      {"(2", "expected a non-negative integer"},
  };
  for (const auto& [shape, message] : cases) {
    SCOPED_TRACE(shape);
    EXPECT_THAT(
        ParseError(NpyBytes(1, Header("<f4", "False", shape), Floats({1}))),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
  }
}

TEST(NpyTest, RejectsMalformedDictionaries) {
  const std::pair<std::string, std::string> cases[] = {
      {"{'descr': '<f4', 'fortran_order': False}\n", "missing key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}\n",
       "unexpected or repeated key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
       "'shape': (1,)}\n",
       "unexpected or repeated key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': no, 'shape': (1,)}\n",
       "expected True or False"},
      {"'descr': '<f4'\n", "expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x\n",
       "unexpected text after '}'"},
  };
  for (const auto& [header, message] : cases) {
    SCOPED_TRACE(header);
    EXPECT_THAT(
        ParseError(NpyBytes(1, header, Floats({1}))),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
  }
}

TEST(NpyTest, RejectsDataOfTheWrongSize) {
  EXPECT_THAT(
      ParseError(NpyBytes(1, Header("<f4", "False", "(2, 3)"),
                          Floats({1, 2, 3, 4, 5}))),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("data too short: shape (2, 3) of '<f4' needs "
                         "24 bytes after the header, the file has 20")));
  EXPECT_THAT(
      ParseError(
          NpyBytes(1, Header("<f2", "False", "(1,)"), std::string(3, '\0'))),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data too long")));
  EXPECT_THAT(
      ParseError(NpyBytes(
          1, Header("<f4", "False", "(4294967296, 4294967296, 4294967296)"),
          "")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("more bytes than fit in memory")));
}

TEST(NpyTest, SerializeChecksTheDataSize) {
  NpyArray array{NpyDType::kFloat32, {3}, Floats({1, 2})};
  EXPECT_THAT(SerializeNpy(array).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("array data is 8 bytes but shape (3,) of "
                                 "'<f4' needs 12")));
  array.data = Floats({1, 2, 3});
  EXPECT_THAT(SerializeNpy(array, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown .npy format version 4")));
}

TEST(NpyTest, FilesReportTheirPath) {
  const std::string path = ::testing::TempDir() + "npy_test_file.npy";
  NpyArray array{NpyDType::kFloat16, {2}, std::string("\x00\x3c\x00\x40", 4)};
  ASSERT_TRUE(WriteNpyFile(path, array).ok());
  absl::StatusOr<NpyArray> read = ReadNpyFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data, array.data);

  const std::string missing = ::testing::TempDir() + "npy_test_missing.npy";
  EXPECT_THAT(ReadNpyFile(missing).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(missing + ": cannot open")));
  EXPECT_THAT(WriteNpyFile("/nonexistent-dir/x.npy", array),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("/nonexistent-dir/x.npy: cannot open for "
                                 "writing")));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace attnserve::client
