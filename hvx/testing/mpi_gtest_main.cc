// main() for GoogleTest binaries whose tests run on several MPI ranks at once.
//
// Started by `bazel test` (no launcher variables), the binary re-executes itself as
// `timeout -k 5 T $MPIEXEC -n $HVX_TEST_NP <itself> <args>`; each rank then runs every test. Only
// rank 0 writes Bazel's XML report. mpiexec exits non-zero when any rank fails, so a failure on any
// rank fails the test. T is HVX_TEST_TIMEOUT_S (default 240): a hung collective ends the test.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/common/files.h"

namespace {

bool UnderLauncher() {
  return std::getenv("PMI_RANK") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
}

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : fallback;
}

[[noreturn]] void Relaunch(int argc, char** argv) {
  const std::string mpiexec = Env("MPIEXEC", "");
  if (mpiexec.empty()) {
    std::fprintf(stderr, "mpi_gtest_main: MPIEXEC is not set (the hvx_mpi_test rule sets it)\n");
    std::exit(2);
  }
  const std::string self = hvx::SelfExecutable();
  if (self.empty()) {
    std::perror("mpi_gtest_main: readlink /proc/self/exe");
    std::exit(2);
  }
  // MPICH leaks a little in MPI_Finalize from a dlclose'd module that no suppression can name.
  std::string asan = Env("ASAN_OPTIONS", "");
  setenv("ASAN_OPTIONS", (asan.empty() ? "detect_leaks=0" : asan + ":detect_leaks=0").c_str(), 1);

  const std::string np = Env("HVX_TEST_NP", "2");
  const std::string timeout_s = Env("HVX_TEST_TIMEOUT_S", "240");
  std::vector<std::string> args = {"timeout", "-k", "5", timeout_s, mpiexec, "-n", np, self};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execvp("timeout", cargs.data());
  std::fprintf(stderr, "mpi_gtest_main: exec timeout: %s\n", std::strerror(errno));
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (!UnderLauncher()) Relaunch(argc, argv);
  if (Env("PMI_RANK", Env("OMPI_COMM_WORLD_RANK", "0").c_str()) != "0") {
    // Bazel's per-test files belong to rank 0; other ranks writing or removing them would race.
    unsetenv("XML_OUTPUT_FILE");
    unsetenv("GTEST_OUTPUT");
    unsetenv("TEST_PREMATURE_EXIT_FILE");
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
