// ResolveMpiexec over PATHs made of fake MPIs: scripts that answer --version as Open MPI's and
// MPICH's mpiexec do, and names as Debian and AWS's images install them.
#include "hvx/launch/mpiexec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

std::string Dir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

// An executable script at DIR/NAME that prints `version` for --version.
std::string Script(const std::string& dir, const std::string& name, const std::string& version) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '" << version
                      << "'; exit 0; fi\nexit 3\n";
  chmod(path.c_str(), 0755);
  return path;
}

constexpr char kOpenMpi[] = "mpiexec (OpenRTE) 4.1.5";
constexpr char kHydra[] = "HYDRA build details:\n    Version: 4.0.2";

TEST(MpiexecTest, MpichsIsFoundBehindOpenMpisFirstOnPath) {
  const std::string ompi = Dir("amazon-openmpi"), mpich = Dir("mpich-bin");
  Script(ompi, "mpiexec", kOpenMpi);
  const std::string hydra = Script(mpich, "mpiexec", kHydra);
  std::string note;
  auto found = ResolveMpiexec("mpiexec", MapEnvironment({{"PATH", ompi + ":" + mpich}}), &note);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, hydra);
  EXPECT_EQ(note, "hvxrun: running MPICH's " + hydra + "; the mpiexec first on PATH, " + ompi +
                      "/mpiexec, is not MPICH's");
  // MPICH's first: no note.
  note.clear();
  EXPECT_EQ(
      ResolveMpiexec("mpiexec", MapEnvironment({{"PATH", mpich + ":" + ompi}}), &note).value_or(""),
      hydra);
  EXPECT_EQ(note, "");
}

TEST(MpiexecTest, DebiansNamesAreKnownWithoutRunningThem) {
  const std::string ompi = Dir("deb-openmpi"), mpich = Dir("deb-mpich");
  Script(ompi, "mpiexec", kOpenMpi);
  // mpiexec.mpich answers nothing: its name says what it is.
  const std::string by_name = Script(mpich, "mpiexec.mpich", "");
  EXPECT_EQ(IdentifyMpiexec(by_name, /*ask=*/false), MpiKind::kHydra);
  const std::string orterun = Script(ompi, "orterun", "");
  const std::string link = ompi + "/mpirun";
  symlink(orterun.c_str(), link.c_str());
  EXPECT_EQ(IdentifyMpiexec(link, /*ask=*/false), MpiKind::kOpenMpi);
  EXPECT_EQ(ResolveMpiexec("mpiexec", MapEnvironment({{"PATH", ompi + ":" + mpich}}), nullptr)
                .value_or(""),
            by_name);
}

TEST(MpiexecTest, OnlyOpenMpiIsRefusedSayingHowToGetMpich) {
  const std::string ompi = Dir("only-openmpi");
  const std::string path = Script(ompi, "mpiexec", kOpenMpi);
  // /usr/bin is looked in too: keep this machine's MPICH out of it with a name only it lacks.
  auto found = ResolveMpiexec("mpiexec", MapEnvironment({{"PATH", ompi}}), nullptr);
  if (access("/usr/bin/mpiexec.hydra", X_OK) == 0 || access("/usr/bin/mpiexec.mpich", X_OK) == 0) {
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_TRUE(found->rfind("/usr/bin/mpiexec.", 0) == 0) << *found;
  } else {
    EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  // Named by path, Open MPI's is refused by its name.
  const std::string orterun = Script(ompi, "orterun", kOpenMpi);
  auto given = ResolveMpiexec(orterun, MapEnvironment({}), nullptr);
  EXPECT_EQ(given.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(given.status().message(),
                        "--mpiexec " + orterun +
                            " is Open MPI's; hvxrun starts the ranks "
                            "with MPICH's mpiexec (hydra): install MPICH (Debian and Ubuntu: "
                            "apt-get install mpich)"))
      << given.status();
  (void)path;
}

TEST(MpiexecTest, APathOfUnknownKindIsTakenWithoutRunningIt) {
  const std::string dir = Dir("wrapper");
  const std::string wrapper = dir + "/record_and_run.sh";
  std::ofstream(wrapper) << "#!/bin/sh\ntouch " << dir << "/ran\n";
  chmod(wrapper.c_str(), 0755);
  EXPECT_EQ(ResolveMpiexec(wrapper, MapEnvironment({}), nullptr).value_or(""), wrapper);
  EXPECT_NE(access((dir + "/ran").c_str(), F_OK), 0) << "the wrapper was run";
}

TEST(MpiexecTest, UnknownOnPathIsTakenWhenThereIsNoMpich) {
  const std::string dir = Dir("unknown");
  const std::string path = Script(dir, "my-mpiexec", "something else");
  EXPECT_EQ(ResolveMpiexec("my-mpiexec", MapEnvironment({{"PATH", dir}}), nullptr).value_or(""),
            path);
  EXPECT_EQ(
      ResolveMpiexec("no-such-mpiexec", MapEnvironment({{"PATH", dir}}), nullptr).status().code(),
      absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace launch
}  // namespace hvx
