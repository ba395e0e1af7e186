// The main of a fuzz target's test (hvx_fuzz_test in fuzz.bzl), for builds without libFuzzer:
// runs LLVMFuzzerTestOneInput on every seed (the target's HvxFuzzSeeds() and the corpus files
// named on the command line), then on a fixed number of inputs mutated from them by a seeded
// generator, so every run of the test tries the same inputs and a failure reproduces. The
// libFuzzer build of the same target (NAME_fuzzer, --config=fuzz) explores by coverage instead.
//
//   NAME [--iterations=N] [--seed=S] [--write_seeds=DIR] [CORPUS_FILE_OR_DIR...]
//   NAME --pack=FILE CORPUS_FILE_OR_DIR...
//
// A corpus file is one input, or, when it begins with the line "hvx fuzz corpus 1", a packed
// corpus of many: after that line, each input as its length in bytes in decimal, a newline, the
// bytes and a newline. The checked-in corpora (fuzz.bzl: fuzz_corpus/NAME.corpus) are packed, one
// file per target. --pack writes the inputs of the named files and directories that are not
// built-in seeds to FILE, packed, without duplicates and sorted, and exits (tools/fuzz --grow).
//
// --write_seeds writes the seeds (built-in and corpus files) to DIR, one file each, and exits: the
// starting corpus of a libFuzzer run (tools/fuzz). An input that crashes the target is written to
// $TEST_UNDECLARED_OUTPUTS_DIR (else the working directory) as crash-<iteration> before the
// signal ends the process.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hvx/testing/fuzz.h"

namespace {

// The input being tried, for the crash handler.
const std::string* g_current = nullptr;
char g_crash_path[4096];

void OnCrash(int sig) {
  if (g_current != nullptr) {
    const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!write(fd, g_current->data(), g_current->size());
      close(fd);
      const char msg[] = "fuzz: the input that crashed is in ";
      (void)!write(2, msg, sizeof(msg) - 1);
      (void)!write(2, g_crash_path, strlen(g_crash_path));
      (void)!write(2, "\n", 1);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input, long iteration) {
  const char* dir = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%ld", dir != nullptr ? dir : ".",
           iteration);
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

bool ReadWhole(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

constexpr char kPackHeader[] = "hvx fuzz corpus 1\n";

// The inputs of a packed corpus (`data` begins with kPackHeader); false when it is cut short or
// a length does not parse.
bool Unpack(const std::string& data, std::vector<std::string>* corpus) {
  size_t at = sizeof(kPackHeader) - 1;
  while (at < data.size()) {
    const size_t eol = data.find('\n', at);
    if (eol == std::string::npos || eol == at || eol - at > 9) return false;
    size_t n = 0;
    for (size_t k = at; k < eol; ++k) {
      if (data[k] < '0' || data[k] > '9') return false;
      n = n * 10 + static_cast<size_t>(data[k] - '0');
    }
    if (data.size() - (eol + 1) < n + 1 || data[eol + 1 + n] != '\n') return false;
    corpus->push_back(data.substr(eol + 1, n));
    at = eol + 1 + n + 1;
  }
  return true;
}

std::string Pack(std::vector<std::string> inputs) {
  std::sort(inputs.begin(), inputs.end());
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
  std::string out = kPackHeader;
  for (const std::string& in : inputs) {
    out += std::to_string(in.size());
    out += '\n';
    out += in;
    out += '\n';
  }
  return out;
}

// Files of `path` (a directory's regular files, sorted, or the file itself), a packed corpus's
// inputs each.
bool AddCorpus(const std::string& path, std::vector<std::string>* corpus) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return false;
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = opendir(path.c_str());
    if (d == nullptr) return false;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') files.push_back(path + "/" + e->d_name);
    }
    closedir(d);
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  for (const std::string& f : files) {
    std::string data;
    if (!ReadWhole(f, &data)) return false;
    if (data.compare(0, sizeof(kPackHeader) - 1, kPackHeader) == 0) {
      if (!Unpack(data, corpus)) {
        fprintf(stderr, "fuzz: %s: a packed corpus cut short or with a bad length\n", f.c_str());
        return false;
      }
    } else {
      corpus->push_back(std::move(data));
    }
  }
  return true;
}

// xorshift64*: the same sequence on every machine.
struct Random {
  uint64_t s;
  uint64_t Next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ULL;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

// A few of the edits libFuzzer makes: bit flips, interesting bytes and numbers, inserted,
// erased, repeated and spliced ranges, ASCII digits (the parsers here read text).
std::string Mutate(const std::vector<std::string>& corpus, Random* r) {
  std::string s = corpus[r->Below(corpus.size())];
  const int edits = 1 + static_cast<int>(r->Below(8));
  static const char* const kTokens[] = {"0",  "-1",    "4294967296", "99999999999999999999",
                                        ":",  ",",     "\n",         "\"",
                                        "\\", "{",     "}",          "[",
                                        "]",  "\x01",  "\x02",       " ",
                                        "e9", "1e999", "\\u0000",    "nan"};
  for (int e = 0; e < edits; ++e) {
    const size_t at = r->Below(s.size() + 1);
    switch (r->Below(7)) {
      case 0:
        if (!s.empty()) s[r->Below(s.size())] ^= static_cast<char>(1 << r->Below(8));
        break;
      case 1:
        if (!s.empty()) {
          static const char kBytes[] = {0, 1, 0x7f, static_cast<char>(0x80),
                                        static_cast<char>(0xff)};
          s[r->Below(s.size())] = kBytes[r->Below(sizeof(kBytes))];
        }
        break;
      case 2:
        s.insert(at, kTokens[r->Below(sizeof(kTokens) / sizeof(kTokens[0]))]);
        break;
      case 3:
        if (!s.empty()) s.erase(at, 1 + r->Below(std::min<size_t>(16, s.size())));
        break;
      case 4: {
        if (s.empty()) break;
        const size_t from = r->Below(s.size());
        s.insert(at, s.substr(from, 1 + r->Below(32)));
        break;
      }
      case 5: {
        const std::string& other = corpus[r->Below(corpus.size())];
        if (other.empty()) break;
        const size_t from = r->Below(other.size());
        s.insert(at, other.substr(from, 1 + r->Below(64)));
        break;
      }
      default:
        s.insert(at, 1, static_cast<char>('0' + r->Below(10)));
        break;
    }
    if (s.size() > 1 << 16) s.resize(1 << 16);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  uint64_t seed = 1;
  std::string write_seeds;
  std::string pack;
  const std::vector<std::string> builtin = HvxFuzzSeeds();
  std::vector<std::string> corpus = builtin;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--iterations=", 0) == 0) {
      iterations = std::atol(arg.c_str() + 13);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (arg.rfind("--write_seeds=", 0) == 0) {
      write_seeds = arg.substr(14);
    } else if (arg.rfind("--pack=", 0) == 0) {
      pack = arg.substr(7);
    } else if (!AddCorpus(arg, &corpus)) {
      fprintf(stderr, "fuzz: cannot read the corpus '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (!pack.empty()) {
    std::vector<std::string> inputs;
    for (size_t k = builtin.size(); k < corpus.size(); ++k) {
      if (std::find(builtin.begin(), builtin.end(), corpus[k]) == builtin.end())
        inputs.push_back(corpus[k]);
    }
    const std::string packed = Pack(std::move(inputs));
    std::ofstream out(pack, std::ios::binary | std::ios::trunc);
    out << packed;
    if (!out.flush()) {
      fprintf(stderr, "fuzz: cannot write %s\n", pack.c_str());
      return 2;
    }
    std::vector<std::string> back;
    printf("fuzz: packed %zu inputs into %s (%zu bytes)\n", Unpack(packed, &back) ? back.size() : 0,
           pack.c_str(), packed.size());
    return 0;
  }
  if (!write_seeds.empty()) {
    mkdir(write_seeds.c_str(), 0755);
    for (size_t k = 0; k < corpus.size(); ++k) {
      const std::string path = write_seeds + "/seed-" + std::to_string(k);
      std::ofstream out(path, std::ios::binary);
      out << corpus[k];
      if (!out) {
        fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
        return 2;
      }
    }
    printf("fuzz: wrote %zu seeds to %s\n", corpus.size(), write_seeds.c_str());
    return 0;
  }
  if (corpus.empty()) corpus.push_back("");
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnCrash);
  for (size_t k = 0; k < corpus.size(); ++k) Run(corpus[k], -static_cast<long>(k) - 1);
  Random r{seed * 0x9E3779B97F4A7C15ULL + 1};
  for (long i = 0; i < iterations; ++i) Run(Mutate(corpus, &r), i);
  printf("fuzz: %zu seeds and %ld mutated inputs (seed %llu) passed\n", corpus.size(), iterations,
         static_cast<unsigned long long>(seed));
  return 0;
}
