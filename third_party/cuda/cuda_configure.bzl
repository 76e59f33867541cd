"""Repository rule exposing the local CUDA toolkit to Bazel as @cuda_toolkit.

Only targets built under --config=cuda depend on it. When the toolkit is
missing, the repository still loads (so plain builds are unaffected), but its
targets fail with a message that says what is missing.
"""

_PRESENT_BUILD = """
package(default_visibility = ["//visibility:public"])

exports_files(["nvcc_env.sh"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)

cc_library(
    name = "cudart_static",
    srcs = ["lib/libcudart_static.a"],
    linkopts = ["-ldl", "-lrt", "-lpthread"],
    deps = [":cuda_headers"],
)
"""

_MISSING_BUILD = """
package(default_visibility = ["//visibility:public"])

exports_files(["nvcc_env.sh"])

genrule(
    name = "missing_toolkit",
    outs = ["missing_toolkit.h"],
    cmd = "echo 'minfer: --config=cuda needs the CUDA toolkit, but {what} was not found. Install the CUDA 13 toolkit at /usr/local/cuda (or set CUDA_HOME), or build without --config=cuda.' >&2; exit 1",
)

cc_library(
    name = "cuda_headers",
    hdrs = [":missing_toolkit"],
)

cc_library(
    name = "cudart_static",
    deps = [":cuda_headers"],
)
"""

def _cuda_configure_impl(rctx):
    cuda_home = rctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    # What the nvcc genrules need from the environment, captured here (a
    # change re-runs this rule and rebuilds only the CUDA objects) instead of
    # --action_env (which would change the key of every action in the build).
    rctx.file("nvcc_env.sh", "CUDA_HOME='%s'\nMINFER_CUDA_CCBIN='%s'\n" % (
        cuda_home,
        rctx.os.environ.get("MINFER_CUDA_CCBIN", ""),
    ))
    needed = [
        cuda_home + "/include/cuda_runtime.h",
        cuda_home + "/lib64/libcudart_static.a",
    ]
    for f in needed:
        if not rctx.path(f).exists:
            rctx.file("BUILD.bazel", _MISSING_BUILD.format(what = f))
            return
    rctx.symlink(cuda_home + "/include", "include")
    rctx.symlink(cuda_home + "/lib64/libcudart_static.a", "lib/libcudart_static.a")
    rctx.file("BUILD.bazel", _PRESENT_BUILD)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME", "MINFER_CUDA_CCBIN"],
    local = True,
)
