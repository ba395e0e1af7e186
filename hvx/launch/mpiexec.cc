#include "hvx/launch/mpiexec.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hvx/launch/subprocess.h"

namespace hvx {
namespace launch {
namespace {

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

constexpr char kOpenMpiHelp[] =
    "hvxrun starts the ranks with MPICH's mpiexec (hydra): install MPICH (Debian and Ubuntu: "
    "apt-get install mpich) or pass --mpiexec with the path of MPICH's mpiexec";

}  // namespace

MpiKind IdentifyMpiexec(const std::string& path, bool ask) {
  for (const std::string& name : {BaseName(path), BaseName(RealPath(path))}) {
    if (name == "mpiexec.hydra" || name == "mpiexec.mpich" || name == "mpirun.mpich" ||
        absl::StrContains(name, "hydra")) {
      return MpiKind::kHydra;
    }
    if (name == "orterun" || name == "prterun" || absl::StrContains(name, "openmpi")) {
      return MpiKind::kOpenMpi;
    }
  }
  if (!ask) return MpiKind::kUnknown;
  absl::StatusOr<std::string> version = RunCapture({path, "--version"}, 10);
  if (!version.ok()) return MpiKind::kUnknown;
  if (absl::StrContains(*version, "HYDRA")) return MpiKind::kHydra;
  if (absl::StrContains(*version, "Open MPI") || absl::StrContains(*version, "OpenRTE") ||
      absl::StrContains(*version, "open-mpi")) {
    return MpiKind::kOpenMpi;
  }
  return MpiKind::kUnknown;
}

absl::StatusOr<std::string> ResolveMpiexec(const std::string& requested, const Environment& env,
                                           std::string* note) {
  if (requested.empty()) return absl::InvalidArgumentError("--mpiexec is empty");
  if (absl::StrContains(requested, '/')) {
    // By its name only: a path given may be a wrapper that must run once, as the job.
    if (IdentifyMpiexec(requested, /*ask=*/false) == MpiKind::kOpenMpi) {
      return absl::FailedPreconditionError(
          absl::StrCat("--mpiexec ", requested, " is Open MPI's; ", kOpenMpiHelp));
    }
    return requested;
  }
  std::vector<std::string> dirs;
  for (absl::string_view dir :
       absl::StrSplit(env.Get("PATH").value_or("/usr/local/bin:/usr/bin:/bin"), ':')) {
    dirs.emplace_back(dir.empty() ? "." : dir);
  }
  // "mpiexec", the generic name: MPICH's own names for it first, in each directory, and where
  // Debian puts them. Another name is that program alone.
  std::vector<std::string> names = {requested};
  if (requested == "mpiexec") {
    names = {"mpiexec.hydra", "mpiexec.mpich", requested};
    dirs.push_back("/usr/bin");
  }
  std::optional<std::string> on_path;  // what a shell would run for `requested`; never MPICH's
  std::optional<std::string> unknown, open_mpi;
  for (const std::string& dir : dirs) {
    for (const std::string& name : names) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (!IsExecutable(path)) continue;
      const MpiKind kind = IdentifyMpiexec(path, /*ask=*/true);
      if (name == requested && !on_path && kind != MpiKind::kHydra) on_path = path;
      switch (kind) {
        case MpiKind::kHydra:
          if (note != nullptr && on_path) {
            *note = absl::StrCat("hvxrun: running MPICH's ", path, "; the ", requested,
                                 " first on PATH, ", *on_path, ", is not MPICH's");
          }
          return path;
        case MpiKind::kOpenMpi:
          if (!open_mpi) open_mpi = path;
          break;
        case MpiKind::kUnknown:
          if (!unknown && name == requested) unknown = path;
          break;
      }
    }
  }
  if (unknown) return *unknown;
  if (open_mpi) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the only ", requested, " found is Open MPI's (", *open_mpi, "); ", kOpenMpiHelp));
  }
  return absl::NotFoundError(absl::StrCat("no ", requested,
                                          " on PATH or in /usr/bin; hvxrun needs MPICH's (Debian "
                                          "and Ubuntu: apt-get install mpich), or pass --mpiexec"));
}

}  // namespace launch
}  // namespace hvx
