"""Build rules for minfer's CUDA code (used only under --config=cuda).

cuda_kernels() compiles each .cu file into its own object with nvcc (one
translation unit per kernel family keeps incremental builds short) and wraps
the objects in a cc_library. Targets are tagged `manual`, so a plain
`bazel build //...` never runs nvcc; binaries pull them in through
select(":cuda_enabled").
"""

def cuda_kernels(name, srcs, hdrs = [], textual_hdrs = [], deps = [], nvcc_flags = [], **kwargs):
    objs = []
    for src in srcs:
        base = src[:-len(".cu")].replace("/", "_")
        obj = "_%s_%s.o" % (name, base)
        native.genrule(
            name = "_%s_%s_nvcc" % (name, base),
            srcs = [src] + hdrs + textual_hdrs,
            outs = [obj],
            tools = ["//cuda/build:nvcc.sh", "@cuda_toolkit//:nvcc_env.sh"],
            cmd = "source $(location @cuda_toolkit//:nvcc_env.sh); export CUDA_HOME MINFER_CUDA_CCBIN; " +
                  "$(location //cuda/build:nvcc.sh) '$(cuda_archs)' '$(cuda_ccbin)' $@ $(location %s) %s" % (src, " ".join(nvcc_flags)),
            tags = ["manual"],
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    # Static by default: a shared library of these objects would reference
    # cudart symbols that only the binary's static cudart provides.
    kwargs.setdefault("linkstatic", True)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        deps = deps + ["//cuda:cuda_runtime"],
        tags = ["manual"],
        **kwargs
    )

def gpu_test(name, srcs, deps = [], data = [], **kwargs):
    """A GPU test (tag `gpu`). Under --config=cuda it is the real gtest binary,
    whose cases skip when no device answers; in plain builds it is a stub
    that passes and says it was built without CUDA."""
    native.cc_test(
        name = name,
        srcs = select({
            "//cuda:cuda_enabled": srcs,
            "//conditions:default": ["//cuda/testing:skip_main.cc"],
        }),
        deps = select({
            "//cuda:cuda_enabled": deps + [
                "//cuda/testing:gpu_test_util",
                "//third_party:gtest_main",
            ],
            "//conditions:default": [],
        }),
        data = data,
        tags = kwargs.pop("tags", []) + ["gpu"],
        **kwargs
    )
