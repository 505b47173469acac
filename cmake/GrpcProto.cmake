# attnserve_grpc_proto(TARGET name ROOT dir PROTOS a.proto b.proto ...)
# Generates protobuf + gRPC C++ code for PROTOS (paths relative to ROOT) into the
# current binary dir and builds them as the static library TARGET.
function(attnserve_grpc_proto)
  cmake_parse_arguments(ARG "" "TARGET;ROOT" "PROTOS" ${ARGN})
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR})
  set(sources)
  foreach(proto ${ARG_PROTOS})
    string(REGEX REPLACE "\\.proto$" "" base ${proto})
    set(outs ${gen_dir}/${base}.pb.cc ${gen_dir}/${base}.pb.h
             ${gen_dir}/${base}.grpc.pb.cc ${gen_dir}/${base}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${outs}
      COMMAND protobuf::protoc
        --proto_path=${ARG_ROOT}
        --cpp_out=${gen_dir}
        --grpc_out=${gen_dir}
        --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
        ${ARG_ROOT}/${proto}
      DEPENDS ${ARG_ROOT}/${proto}
      COMMENT "Generating C++ code for ${proto}")
    list(APPEND sources ${outs})
  endforeach()
  add_library(${ARG_TARGET} ${sources})
  target_include_directories(${ARG_TARGET} PUBLIC ${gen_dir})
  target_link_libraries(${ARG_TARGET} PUBLIC protobuf::libprotobuf gRPC::grpc++)
  # Generated code is not ours to warn about.
  target_compile_options(${ARG_TARGET} PRIVATE -w)
endfunction()
