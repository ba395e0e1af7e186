// Why the shared-memory plane stages data through its regions instead of reading the peers'
// buffers where they lie: the one way to read another process's memory in place without a kernel
// module is cross-memory attach (process_vm_readv), and this measures it against the copies the
// plane makes, on 32 MiB in the plane's 256 KiB chunks, interleaved, medians of 7:
//
//   bazel run -c opt //hvx/shm:cma_bench
//
//   stage         StreamBytes into another buffer (what publishing a chunk costs)
//   copy          CopyBytes (the fetch of a finished chunk)
//   cma-scratch   process_vm_readv of a child's chunk into one 256 KiB buffer (read, then fold)
//   cma-place     process_vm_readv of a child's chunk into its place
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hvx/common/copy.h"

namespace {

double Ms(const std::function<bool()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  if (!fn()) return -1;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

char* Pages(size_t n, int fill) {
  void* p =
      mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, fill, n);
  return static_cast<char*>(p);
}

}  // namespace

int main() {
  const size_t n = size_t{32} << 20, piece = size_t{256} << 10;
  char* src = Pages(n, 1);
  char* dst = Pages(n, 2);
  std::vector<char> scratch(piece);
  if (src == nullptr || dst == nullptr) return 1;
  int hold[2];
  if (pipe(hold) != 0) return 1;
  // The child shares src's pages (copy-on-write, untouched): its memory is what a peer rank's
  // gradients would be.
  const pid_t child = fork();
  if (child == 0) {
    char c;
    (void)!read(hold[0], &c, 1);
    _exit(0);
  }
  const auto cma = [&](char* local, bool advance) {
    for (size_t off = 0; off < n; off += piece) {
      iovec l{advance ? local + off : local, piece}, r{src + off, piece};
      if (process_vm_readv(child, &l, 1, &r, 1, 0) != static_cast<ssize_t>(piece)) {
        std::perror("process_vm_readv");
        return false;
      }
    }
    return true;
  };
  struct Way {
    std::string name;
    std::function<bool()> fn;
    std::vector<double> ms;
  };
  std::vector<Way> ways = {
      {"stage (StreamBytes)",
       [&] {
         for (size_t off = 0; off < n; off += piece) hvx::StreamBytes(dst + off, src + off, piece);
         return true;
       }},
      {"copy (CopyBytes)",
       [&] {
         for (size_t off = 0; off < n; off += piece) hvx::CopyBytes(dst + off, src + off, piece);
         return true;
       }},
      {"cma-scratch (process_vm_readv)", [&] { return cma(scratch.data(), false); }},
      {"cma-place (process_vm_readv)", [&] { return cma(dst, true); }},
  };
  for (int round = 0; round < 8; ++round) {
    for (Way& w : ways) {
      const double ms = Ms(w.fn);
      if (ms < 0) return 1;
      if (round > 0) w.ms.push_back(ms);  // round 0 warms up
    }
  }
  (void)!write(hold[1], "x", 1);
  waitpid(child, nullptr, 0);
  std::printf("32 MiB in 256 KiB chunks, medians of 7 interleaved rounds\n");
  const double base = [&] {
    std::vector<double> v = ways[0].ms;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }();
  for (Way& w : ways) {
    std::sort(w.ms.begin(), w.ms.end());
    const double med = w.ms[w.ms.size() / 2];
    std::printf("%-34s %8.2f ms  %5.2fx stage\n", w.name.c_str(), med, med / base);
  }
  return 0;
}
