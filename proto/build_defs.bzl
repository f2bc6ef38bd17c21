"""shardps_proto_library: C++ (and optionally gRPC) code from .proto files.

Bazel 4's native proto rules want to build protoc from source; we use the
system protoc and grpc_cpp_plugin instead (Debian's protobuf-compiler and
protobuf-compiler-grpc), run from one genrule per library.
"""

def shardps_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    """Declares <name> (a cc_library) and <name>_files (its .proto files).

    Args:
      name: the cc_library's name.
      srcs: .proto files in this package.
      deps: other shardps_proto_library names whose protos these import.
      grpc: also generate gRPC service stubs (.grpc.pb.h/.cc).
      visibility: of the cc_library.
    """
    stems = [s[:-len(".proto")] for s in srcs]
    outs = [s + ".pb.h" for s in stems] + [s + ".pb.cc" for s in stems]
    cmd = "$(location @system//:protoc) -I. -I/usr/include --cpp_out=$(GENDIR)"
    tools = ["@system//:protoc"]
    if grpc:
        outs += [s + ".grpc.pb.h" for s in stems] + [s + ".grpc.pb.cc" for s in stems]
        cmd += (" --grpc_out=$(GENDIR)" +
                " --plugin=protoc-gen-grpc=$(location @system//:grpc_cpp_plugin)")
        tools.append("@system//:grpc_cpp_plugin")

    native.filegroup(
        name = name + "_files",
        srcs = srcs + [d + "_files" for d in deps],
        visibility = visibility,
    )
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_files" for d in deps],
        outs = outs,
        cmd = cmd + " " + " ".join(["$(location %s)" % s for s in srcs]),
        tools = tools,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:protobuf"] + (["@system//:grpc"] if grpc else []),
        visibility = visibility,
    )
