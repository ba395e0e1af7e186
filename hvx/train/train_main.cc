#include "hvx/train/train_main.h"

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/launch/cluster_env.h"
#include "hvx/launch/launch.h"
#include "hvx/launch/rank_wrapper.h"
#include "hvx/launch/records.h"
#include "hvx/torch/host_allocator.h"
#include "hvx/train/checkpoint.h"
#include "hvx/train/config.h"
#include "hvx/train/device.h"
#include "hvx/train/export.h"
#include "hvx/train/trainer.h"

namespace hvx {
namespace train {
namespace {

constexpr char kUsage[] =
    "usage: train --config=NAME [--override='<text proto>']... [--data_dir=DIR] [--sample_log=DIR] "
    "[--max_steps=N] [--fresh] [--export=PATH [--export_from=CKPT]] | --version\n"
    "  --config      a TrainConfig text file: a path, a name in the invoking directory, or a "
    "bundled\n"
    "                config (fashion_mnist.pbtxt, imagenet.pbtxt, imagenet_fast.pbtxt; installed "
    "as\n"
    "                PREFIX/bin/train or PREFIX/bin/hvx-train: those in PREFIX/configs)\n"
    "  --override    text proto merged into the config, e.g. --override='epochs: 2 data { "
    "batch_size: 64 }'\n"
    "  --data_dir    read the data's files from DIR: train_files' and eval_files' file names (the "
    "last\n"
    "                part of each pattern) in DIR, e.g. DIR/train-* for "
    "\"/data/imagenet/train-*\"\n"
    "  --sample_log  write the sample ids each rank trained on, per epoch, into DIR\n"
    "  --max_steps   stop after N global steps (writing a checkpoint when checkpoints are on)\n"
    "  --fresh       (or --fresh=true; --fresh=false: resume as without it)\n"
    "                start over instead of resuming: the checkpoints already in checkpoint.dir "
    "are\n"
    "                moved into checkpoint.dir/replaced-<unix seconds>/, once per job: a restart\n"
    "                of the same job (hvxrun --max-restarts, a Slurm requeue, a SageMaker spot\n"
    "                restart) resumes what it wrote since\n"
    "  --export      at the end (also of a run already complete), write the weights as a file\n"
    "                Python's torch.load reads as a state dict (name -> tensor)\n"
    "  --export_from with --export: export this checkpoint file's model instead of training\n";

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string SelfPath(const std::string& argv0) {
  const std::string self = SelfExecutable();
  return self.empty() ? argv0 : self;
}

absl::StatusOr<int> ResolveNumProcesses(const TrainConfig& config) {
  const std::string& np = config.launch().num_processes();
  if (np == "auto") return std::max(1, CountVisibleGpus(Environment::Process()));
  int n = 1;
  if (!absl::SimpleAtoi(np, &n) || n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("launch.num_processes: bad value \"", np, "\""));
  }
  return n;
}

InitOptions MakeInitOptions(const TrainConfig& config, InitOptions options) {
  const EngineConfig& e = config.engine();
  if (e.cycle_time_ms() > 0) options.cycle_time_ms = e.cycle_time_ms();
  if (e.fusion_threshold_bytes() > 0) options.fusion_threshold_bytes = e.fusion_threshold_bytes();
  if (e.cache_capacity() > 0) options.cache_capacity = e.cache_capacity();
  if (!e.timeline_path().empty()) options.timeline_path = e.timeline_path();
  return options;
}

absl::StatusOr<int> Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  HVX_ASSIGN_OR_RETURN(TrainFlags flags, ParseTrainFlags(args));
  if (flags.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (flags.version) {
    std::printf("hvx-train: %s\n", DescribeBuild().c_str());
    return 0;
  }
  const Environment& env = Environment::Process();
  ConfigSearchPath search;
  search.working_dir = env.Get("BUILD_WORKING_DIRECTORY").value_or("");
  if (search.working_dir.empty()) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) search.working_dir = cwd;
  }
  search.bundled_dir = FindBundledConfigDir(argv[0], env, SelfExecutable());
  search.home = env.Get("HOME").value_or("");
  HVX_ASSIGN_OR_RETURN(LoadedConfig loaded, LoadTrainConfig(flags.config, search, flags.overrides));
  if (!flags.data_dir.empty()) {
    HVX_ASSIGN_OR_RETURN(const std::string data_dir, ExpandHome(flags.data_dir, search.home));
    HVX_RETURN_IF_ERROR(RebaseDataFiles(data_dir, loaded.config.mutable_data()));
  }
  const TrainConfig& config = loaded.config;
  HVX_ASSIGN_OR_RETURN(const int np, ResolveNumProcesses(config));
  if (np > 1 && !launch::IsUnderLauncher(env)) {
    launch::LaunchOptions lo;
    lo.np = np;
    lo.hosts = config.launch().hosts();
    lo.program.push_back(SelfPath(argv[0]));
    lo.program.insert(lo.program.end(), args.begin(), args.end());
    // The config resolves the same way in every rank.
    if (env.Get("BUILD_WORKING_DIRECTORY").has_value()) {
      lo.env.emplace_back("BUILD_WORKING_DIRECTORY", search.working_dir);
    }
    std::fprintf(stderr, "train: starting %d processes with hvxrun\n", np);
    return launch::RunJob(lo);
  }
  // Before LibTorch allocates anything: see hvx/common/memory.h (about 2x on CPU training here)
  // and hvx/torch/host_allocator.h (blocks over glibc's 32 MiB limit, e.g. evaluation batches).
  HVX_ASSIGN_OR_RETURN(const std::string host_memory, KeepHostMemoryForReuse(env));
  HVX_ASSIGN_OR_RETURN(InitOptions init, InitOptions::FromEnv(env));
  HVX_RETURN_IF_ERROR(Init(MakeInitOptions(config, init)));
  HVX_LOG_RANK0(INFO) << "config " << loaded.path;
  HVX_LOG_RANK0(INFO) << host_memory;
  RunOptions options;
  auto sample_log = ExpandHome(flags.sample_log, search.home);
  if (!sample_log.ok()) return Annotate(sample_log.status(), "--sample_log");
  options.sample_log_dir = *sample_log;
  // Each attempt of an elastic job (hvxrun --max-restarts) logs apart: a failed attempt trained
  // samples past its last checkpoint that the next attempt trains again.
  if (auto attempt = env.GetNonEmpty("HVX_RESTART_COUNT");
      attempt && !options.sample_log_dir.empty()) {
    options.sample_log_dir = absl::StrCat(options.sample_log_dir, "/attempt", *attempt);
  }
  options.max_steps = flags.max_steps;
  options.fresh = flags.fresh;
  options.fresh_job_id = FreshJobId(env);
  for (auto [flag, in, out] :
       {std::make_tuple("--export", &flags.export_path, &options.export_path),
        std::make_tuple("--export_from", &flags.export_from, &options.export_from)}) {
    auto path = ExpandHome(*in, search.home);
    if (!path.ok()) return Annotate(path.status(), flag);
    *out = *path;
  }
  // Before training: an export folder that cannot be made fails now, not after the last step.
  if (!options.export_path.empty()) {
    HVX_RETURN_IF_ERROR(Annotate(PrepareExportPath(options.export_path), "--export"));
  }
  auto result = RunTraining(config, options);
  if (!result.ok()) {
    // No shutdown: its barrier waits for ranks that may never come (a cut link, a rank still
    // training), up to HVX_SHUTDOWN_TIMEOUT_S. Exiting 1, hvx ends the process at once (api.h,
    // Shutdown), the launcher names this rank and stops the others.
    HVX_LOG(ERROR) << result.status();
    return 1;
  }
  if (Rank() == 0 && !result->exported_to.empty()) {
    std::printf("exported the weights to %s\n", result->exported_to.c_str());
    std::fflush(stdout);
  }
  if (!options.export_from.empty()) {
    // Nothing was trained.
  } else if (Rank() == 0 && result->already_complete) {
    const std::string& dir = config.checkpoint().dir();
    std::printf(
        "the run in %s is already complete (%lld of %d epochs done, %lld steps); nothing to train. "
        "To start "
        "fresh, pass --fresh (moves its checkpoints to %s/replaced-<time>/) or another directory: "
        "--override='checkpoint { dir: \"NEW_DIR\" }'; to train longer, raise epochs: "
        "--override='epochs: N'\n",
        dir.c_str(), static_cast<long long>(result->epochs_done), config.epochs(),
        static_cast<long long>(result->global_step), dir.c_str());
    std::fflush(stdout);
  } else if (Rank() == 0) {
    std::printf("%s\n", DescribeResult(*result).c_str());
    std::fflush(stdout);
  }
  const int rank = Rank();  // Rank() is gone after Shutdown
  HVX_RETURN_IF_ERROR(Shutdown());
  if (!result->preempted) return 0;
  // Checkpointed and stopped early on request: run the same command again to go on.
  if (!config.checkpoint().dir().empty()) return launch::kPreemptedExitCode;
  if (rank == 0) {
    std::fprintf(stderr,
                 "train: stopped early on a checkpoint request (SIGTERM or hvxrun's SIGUSR1), but "
                 "checkpoint.dir is empty: nothing was saved, and running again starts over\n");
  }
  return 1;
}

}  // namespace

absl::StatusOr<TrainFlags> ParseTrainFlags(const std::vector<std::string>& args) {
  TrainFlags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--version") {
      flags.version = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      flags.help = true;
      continue;
    }
    if (arg == "--fresh" || arg == "--fresh=true" || arg == "--fresh=false") {
      flags.fresh = arg != "--fresh=false";  // the last one given counts
      continue;
    }
    std::string name = arg, value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (absl::StartsWith(arg, "--")) {
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      value = args[++i];
    }
    if (name == "--config") {
      flags.config = value;
    } else if (name == "--override") {
      flags.overrides.push_back(value);
    } else if (name == "--data_dir") {
      flags.data_dir = value;
    } else if (name == "--sample_log") {
      flags.sample_log = value;
    } else if (name == "--export") {
      flags.export_path = value;
    } else if (name == "--export_from") {
      flags.export_from = value;
    } else if (name == "--max_steps") {
      if (!absl::SimpleAtoi(value, &flags.max_steps) || flags.max_steps < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--max_steps: not a count: \"", value, "\""));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument \"", arg, "\"\n", kUsage));
    }
  }
  if (flags.config.empty() && !flags.help && !flags.version) {
    return absl::InvalidArgumentError(absl::StrCat("--config is required\n", kUsage));
  }
  if (!flags.export_from.empty() && flags.export_path.empty()) {
    return absl::InvalidArgumentError("--export_from needs --export=PATH: where to write");
  }
  return flags;
}

std::string FindBundledConfigDir(const std::string& argv0, const Environment& env,
                                 const std::string& self) {
  const std::string executable = self.empty() ? argv0 : self;
  std::vector<std::string> roots;
  if (std::optional<std::string> dir = env.GetNonEmpty("RUNFILES_DIR")) roots.push_back(*dir);
  roots.push_back(executable + ".runfiles");
  roots.push_back(argv0 + ".runfiles");
  for (const std::string& root : roots) {
    if (!IsDir(root)) continue;
    // hvx built as the main repository, then hvx vendored as an external repository.
    if (IsFile(root + "/hvx/data/fashion_mnist.pbtxt")) return root + "/hvx/data";
    DIR* d = opendir(root.c_str());
    if (d == nullptr) continue;
    std::string found;
    while (dirent* e = readdir(d)) {
      const std::string candidate = absl::StrCat(root, "/", e->d_name, "/external/hvx/data");
      if (IsFile(candidate + "/fashion_mnist.pbtxt")) found = candidate;
    }
    closedir(d);
    if (!found.empty()) return found;
  }
  // Installed: PREFIX/bin/NAME beside PREFIX/configs.
  if (const std::string bin = DirName(executable); absl::EndsWith(bin, "/bin")) {
    const std::string configs = bin.substr(0, bin.size() - 3) + "configs";
    if (IsDir(configs)) return configs;
  }
  return "";
}

namespace {

// HVX_FAILPOINT's action "throw": a C++ exception out of the training step, as a LibTorch error
// (c10::Error) or std::bad_alloc would leave it.
[[maybe_unused]] const bool kThrowFailpoint = RegisterFailpointAction(
    "throw", [] { throw std::runtime_error("an exception thrown at a failpoint"); });

}  // namespace

int TrainMain(int argc, char** argv) {
  // A self-launched job starts this same binary as hvxrun's per-rank wrapper first.
  if (const int rc = launch::MaybeRunRankWrapper(argc, argv); rc >= 0) return rc;
  absl::StatusOr<int> code;
  // An exception nothing caught (a LibTorch error, memory) ended the rank in std::terminate:
  // an abort with a core dump, blamed on signal 6. It is this rank's failure, said in one line;
  // the failing exit then ends the process at once (hvx's exit handler) and the launcher the job.
  try {
    code = Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: rank %d: uncaught exception: %s\n", Rank(), e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "train: rank %d: uncaught exception of an unknown type\n", Rank());
    return 1;
  }
  if (!code.ok()) {
    std::fprintf(stderr, "train: %s\n", std::string(code.status().message()).c_str());
    return 2;
  }
  return *code;
}

}  // namespace train
}  // namespace hvx
