#include "hvx/launch/command.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/launch/output.h"

namespace hvx {
namespace launch {

std::vector<std::pair<std::string, std::string>> JobEnvironment(const LaunchOptions& options,
                                                                const JobSetup& setup) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"HVX_SIZE", absl::StrCat(setup.plan.size)},
      {"HVX_TAGGED_OUTPUT", options.tag_output == TagMode::kNone ? "0" : "1"},
  };
  for (const std::pair<std::string, std::string>& var : setup.env) {
    const bool given = std::any_of(options.env.begin(), options.env.end(),
                                   [&var](const auto& x) { return x.first == var.first; });
    if (!given) env.push_back(var);
  }
  env.insert(env.end(), options.env.begin(), options.env.end());
  return env;
}

std::vector<std::string> MpiexecCommand(const LaunchOptions& options, const JobSetup& setup,
                                        const std::string& wrapper) {
  const std::string hosts = FormatHostList(setup.plan.used_hosts);
  std::vector<std::string> argv = {options.mpiexec, "-rmk", "user", "-launcher"};
  argv.push_back(setup.launcher == ClusterHosts::Launcher::kSlurm && options.launcher_exec.empty()
                     ? "slurm"
                     : "ssh");
  if (!options.launcher_exec.empty()) {
    argv.insert(argv.end(), {"-launcher-exec", options.launcher_exec});
  }
  if (!setup.this_host.empty()) argv.insert(argv.end(), {"-localhost", setup.this_host});
  argv.insert(argv.end(), {"-hosts", hosts, "-n", absl::StrCat(setup.plan.size), "-prepend-pattern",
                           kHydraMarkerPattern});
  argv.insert(argv.end(), {wrapper, kRankWrapperFlag, "--plan", hosts, "--"});
  argv.insert(argv.end(), options.program.begin(), options.program.end());
  return argv;
}

std::vector<std::string> RemoteCommand(const LaunchOptions& options, const std::string& host,
                                       const std::string& command) {
  if (!options.launcher_exec.empty()) return {options.launcher_exec, host, command};
  return {"ssh", "-o", "BatchMode=yes", host, command};
}

std::string ShellQuote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=./:,@%") == std::string::npos) {
    return word;
  }
  bool control = false;
  for (char c : word) control |= static_cast<unsigned char>(c) < 0x20;
  if (!control) {
    std::string out = "'";
    for (char c : word) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    return out + "'";
  }
  std::string out = "$'";
  for (char c : word) {
    if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\%03o", static_cast<unsigned char>(c));
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  return absl::StrJoin(argv, " ",
                       [](std::string* out, const std::string& w) { out->append(ShellQuote(w)); });
}

}  // namespace launch
}  // namespace hvx
