// minferd / minferctl version, reported by GetServerStatus and --version.
#ifndef MINFER_DAEMON_VERSION_H_
#define MINFER_DAEMON_VERSION_H_

namespace minfer {

inline constexpr const char* kMinferVersion = "0.1.0";

}  // namespace minfer

#endif  // MINFER_DAEMON_VERSION_H_
