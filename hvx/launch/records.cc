#include "hvx/launch/records.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace hvx {
namespace launch {

std::string FormatStartRecord(int rank, const std::string& host, int pid) {
  return std::string(kControlMagic) + "start rank=" + std::to_string(rank) +
         " pid=" + std::to_string(pid) + " host=" + host + "\n";
}

std::string FormatExitRecord(int rank, const std::string& host, int wait_status) {
  const std::string how = WIFSIGNALED(wait_status)
                              ? " signal=" + std::to_string(WTERMSIG(wait_status))
                              : " code=" + std::to_string(WEXITSTATUS(wait_status));
  return std::string(kControlMagic) + "exit rank=" + std::to_string(rank) + how + " host=" + host +
         "\n";
}

std::string FormatErrorRecord(int rank, const std::string& host, const std::string& message,
                              int exit_code) {
  std::string flat = message;
  for (char& c : flat) {
    if (c == '\n') c = ' ';
  }
  return std::string(kControlMagic) + "error rank=" + std::to_string(rank) + " host=" + host +
         " code=" + std::to_string(exit_code) + " msg=" + flat + "\n";
}

namespace {

// A record's field is one word: what is not printable ASCII or is a space becomes '_'.
std::string Word(const std::string& text) {
  std::string out = text.empty() ? "-" : text;
  for (char& c : out) {
    if (c <= ' ' || c > '~') c = '_';
  }
  return out;
}

}  // namespace

std::string FormatFlightRecord(int rank, const std::string& host, const std::string& proc,
                               const std::string& wchan, long long now_ns, size_t events,
                               const std::string& why) {
  return std::string(kControlMagic) + "flight rank=" + std::to_string(rank) + " host=" + host +
         " proc=" + Word(proc) + " wchan=" + Word(wchan) + " now=" + std::to_string(now_ns) +
         " events=" + std::to_string(events) + " why=" + Word(why) + "\n";
}

std::string FormatFlightStackRecord(int rank, const std::string& line, bool first,
                                    const std::string& why, size_t lines) {
  std::string text = line;
  for (char& c : text) {
    if (c < ' ' || c > '~') c = '?';
  }
  return std::string(kControlMagic) + "flightstack rank=" + std::to_string(rank) +
         (first ? " first=1 lines=" + std::to_string(lines) + " why=" + Word(why) : "") +
         " msg=" + text + "\n";
}

std::string FormatFlightEventRecord(int rank, const std::string& encoded_event) {
  return std::string(kControlMagic) + "flightev rank=" + std::to_string(rank) +
         " ev=" + Word(encoded_event) + "\n";
}

std::string EscapeMarkerBytes(const char* data, size_t size) {
  std::string out;
  out.reserve(size);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\x01') {
      out += "\\x01";
    } else {
      out += data[i];
    }
  }
  return out;
}

// Its own copy of hvx::WriteFully (hvx/common/files.h): the rank wrapper links no library but the
// C++ one (see rank_wrapper.h).
void WriteFully(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace launch
}  // namespace hvx
